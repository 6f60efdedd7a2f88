import { describe, expect, it } from "@jest/globals";
import { create } from "@bufbuild/protobuf";
import { authv1, eventsv1 } from "@pi/proto";
import { commands, parseLimit, UsageError, type OpsClients } from "../src/commands.js";

// `ops audit`: what it asks the auth service and what it prints (docs/security.md, "Audit trail").

function withRecords(records: eventsv1.AuditRecord[]) {
  const asked: authv1.ListAuditRecordsRequest[] = [];
  const auth = {
    listAuditRecords: async (req: authv1.ListAuditRecordsRequest) => {
      asked.push(req);
      return create(authv1.ListAuditRecordsResponseSchema, { records });
    },
  };
  return { ops: commands({ auth } as unknown as OpsClients), asked };
}

describe("ops audit", () => {
  it("prints the records it is given, in the order given (newest first), with ISO times and null for no reason", async () => {
    const { ops, asked } = withRecords([
      create(eventsv1.AuditRecordSchema, { id: "evt_b", occurredAt: 1_700_000_001_000n, service: "connection", actor: "ptr_p", action: "connection.delete", targets: ["con_c", "ptr_p"], outcome: eventsv1.AuditOutcome.OK }),
      create(eventsv1.AuditRecordSchema, {
        id: "evt_a",
        occurredAt: 1_700_000_000_000n,
        service: "connection",
        actor: "caregiver",
        action: "connection.sever",
        targets: ["con_c"],
        outcome: eventsv1.AuditOutcome.REFUSED,
        reason: "failed_precondition: the connection is pending; only an approved connection can be severed",
      }),
    ]);
    const out = await ops.audit({ since: "2023-11-14T00:00:00Z", target: "con_c", limit: "2" });
    expect(asked).toEqual([expect.objectContaining({ since: BigInt(Date.parse("2023-11-14T00:00:00Z")), target: "con_c", limit: 2 })]);
    expect(out).toEqual({
      records: [
        { id: "evt_b", occurred_at: "2023-11-14T22:13:21.000Z", actor: "ptr_p", action: "connection.delete", targets: ["con_c", "ptr_p"], outcome: "ok", reason: null, service: "connection" },
        {
          id: "evt_a",
          occurred_at: "2023-11-14T22:13:20.000Z",
          actor: "caregiver",
          action: "connection.sever",
          targets: ["con_c"],
          outcome: "refused",
          reason: "failed_precondition: the connection is pending; only an approved connection can be severed",
          service: "connection",
        },
      ],
    });
  });

  it("without options asks for everything, 100 at most", async () => {
    const { ops, asked } = withRecords([]);
    expect(await ops.audit()).toEqual({ records: [] });
    expect(asked).toEqual([expect.objectContaining({ since: 0n, target: "", limit: 100 })]);
  });

  it.each(["0", "1001", "-3", "ten", "2.5", ""])("--limit %j is refused", (value) => {
    expect(() => parseLimit(value)).toThrow(UsageError);
  });

  it("--since must be an ISO date-time with a zone", async () => {
    const { ops, asked } = withRecords([]);
    await expect(ops.audit({ since: "yesterday" })).rejects.toThrow(UsageError);
    expect(asked).toEqual([]);
  });
});
