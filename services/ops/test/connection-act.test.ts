import { afterEach, beforeEach, describe, expect, it, jest } from "@jest/globals";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { connectionv1 } from "@pi/proto";
import { actOutcomeUnknown, commands, type OpsClients } from "../src/commands.js";

// The caregiver's tap through `ops connection approve|decline|sever`: one act id, sent again while
// the outcome is unknown (a replica died under it), never after the service's own verdict.

function withAnswers(answers: (Error | "ok")[]) {
  const asked: { id: string; actId?: string }[] = [];
  const approveConnection = async (req: { id: string; actId?: string }) => {
    asked.push(req);
    const next = answers.shift()!;
    if (next !== "ok") throw next;
    return { result: { id: req.id, internalStatus: connectionv1.InternalStatus.APPROVED } };
  };
  return { ops: commands({ connection: { approveConnection } } as unknown as OpsClients), asked };
}

beforeEach(() => jest.useFakeTimers());
afterEach(() => jest.useRealTimers());

async function settle<T>(p: Promise<T>): Promise<T> {
  await jest.advanceTimersByTimeAsync(5_000);
  return p;
}

describe("ops connection approve|decline|sever: one act id, retried while its outcome is unknown", () => {
  it("sends the act again with the same act id after a replica died under it, and prints the answer", async () => {
    const { ops, asked } = withAnswers([
      new RpcError("connection reset", Status.UNAVAILABLE),
      new RpcError("deadline", Status.DEADLINE_EXCEEDED),
      "ok",
    ]);
    expect(await settle(ops.connectionAct("approve", "con_x"))).toEqual({ id: "con_x", internal_status: "approved" });
    expect(asked).toHaveLength(3);
    expect(asked[0]!.actId).toMatch(/^act_[0-9A-Za-z]{22}$/);
    expect(new Set(asked.map((a) => a.actId)).size).toBe(1);
  });

  it("a new act id for each act", async () => {
    const { ops, asked } = withAnswers(["ok", "ok"]);
    await settle(ops.connectionAct("approve", "con_x"));
    await settle(ops.connectionAct("approve", "con_x"));
    expect(asked[0]!.actId).not.toBe(asked[1]!.actId);
  });

  it("the service's verdict is final: not found or refused is not sent again", async () => {
    for (const code of [
      Status.NOT_FOUND,
      Status.FAILED_PRECONDITION,
      Status.INVALID_ARGUMENT,
      Status.PERMISSION_DENIED,
    ]) {
      const { ops, asked } = withAnswers([new RpcError("no", code), "ok"]);
      const act = ops.connectionAct("approve", "con_x");
      const failed = expect(act).rejects.toThrow("no");
      await jest.advanceTimersByTimeAsync(5_000);
      await failed;
      expect(asked).toHaveLength(1);
    }
  });

  it("gives up once the retry time has passed, with the last failure", async () => {
    const { ops, asked } = withAnswers(
      Array.from({ length: 50 }, () => new RpcError("connection refused", Status.UNAVAILABLE)),
    );
    const act = ops.connectionAct("approve", "con_x");
    const failed = expect(act).rejects.toMatchObject({ code: Status.UNAVAILABLE });
    await jest.advanceTimersByTimeAsync(10_000);
    await failed;
    expect(asked.length).toBeGreaterThan(3);
    expect(asked.length).toBeLessThanOrEqual(20);
  });

  it("an unknown outcome is a failure without the service's answer", () => {
    expect(
      [Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.UNKNOWN, Status.INTERNAL, Status.ABORTED].every((c) =>
        actOutcomeUnknown(new RpcError("x", c)),
      ),
    ).toBe(true);
    expect(
      [
        Status.NOT_FOUND,
        Status.FAILED_PRECONDITION,
        Status.INVALID_ARGUMENT,
        Status.PERMISSION_DENIED,
        Status.UNAUTHENTICATED,
        Status.UNIMPLEMENTED,
      ].some((c) => actOutcomeUnknown(new RpcError("x", c))),
    ).toBe(false);
  });
});
