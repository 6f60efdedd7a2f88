import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { MongoClient } from "mongodb";
import { clientsFor } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { commonv1, connectionv1 } from "@pi/proto";
import { startConnectionService } from "../src/service.js";
import type { Trigger } from "../src/state-machine.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";
import { collectConnectionEvents, type EventCollector } from "../../../test/support/connection-events.js";

// Two replicas of the connection service (two started instances, each with its own MongoClient) on
// one database, racing on one connection. Only single-document atomic updates keep them right: no
// lock is shared, none exists. A race is made to happen, not hoped for: the test seam
// (ConnectionServiceSeams.beforeWrite) holds one replica's write between its read and its
// compare-and-set while the other replica writes.

type Client = ReturnType<ReturnType<typeof clientsFor>["connection"]>;

let settings: Settings;
const replicas: RunningService[] = [];
let a: Client;
let b: Client;
let ga: Client;
let gb: Client;
let events: EventCollector;
let mongo: MongoClient;

/** Per replica, the writes to hold once: `${trigger} ${id}` -> the held write's signals. */
const holds: Map<string, { reached: () => void; released: Promise<void> }>[] = [new Map(), new Map()];
/** Every write attempt each replica made, as `${trigger} ${id}` (one more after a lost compare-and-set). */
const attempts: string[][] = [[], []];

/** Holds replica `r`'s next `trigger` write on `id` after its read: `held` resolves once it waits there, `release()` lets it write. */
function holdWrite(r: number, trigger: Trigger, id: string) {
  let reached!: () => void;
  let release!: () => void;
  const held = new Promise<void>((resolve) => (reached = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  holds[r]!.set(`${trigger} ${id}`, { reached, released });
  return { held, release };
}

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++) {
    const beforeWrite = async (id: string, trigger: Trigger) => {
      const key = `${trigger} ${id}`;
      attempts[i]!.push(key);
      const hold = holds[i]!.get(key);
      if (!hold) return;
      holds[i]!.delete(key);
      hold.reached();
      await hold.released;
    };
    replicas.push(
      await startConnectionService(settings, createLogger(`connection-${i}`, settings.LOG_LEVEL), { beforeWrite }),
    );
  }
  // a, b: the caregiver's acts and elders (the operator CLI's identity); ga, gb: partners' requests (the gateway's).
  [a, b] = replicas.map((r) => clientsFor({ ...settings, ...addressOf("connection", r) }).connectionAdmin());
  [ga, gb] = replicas.map((r) =>
    clientsFor({ ...as(settings, "gateway"), CONNECTION_SERVICE_URL: `http://127.0.0.1:${r.port}` }).connection(),
  );
  events = await collectConnectionEvents(settings.KAFKA_BROKERS, settings.DATA_NAMESPACE);
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await events?.stop();
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "connection")).dropDatabase();
  await mongo?.close();
});

const stored = (id: string) =>
  mongo
    .db(databaseName(settings.DATA_NAMESPACE, "connection"))
    .collection("connections")
    .findOne({ _id: id as never });

/** A live connection to a new elder, requested through replica A. */
async function pendingConnection(): Promise<{ id: string; partnerId: string }> {
  const partnerId = newId("ptr");
  const { address } = await a.createElder({});
  const { connection } = await ga.requestConnection({ partnerId, mode: commonv1.Mode.LIVE, elderAddress: address });
  return { id: connection!.id, partnerId };
}

/**
 * Severs the connection (through replica B) and waits for its connection.revoked: every event the
 * race published went to the same partition (one key), so all of them have been read by then.
 */
async function settled(id: string) {
  await b.severConnection({ id });
  await events.waitFor(() => events.of(id).some((e) => e.type === "connection.revoked"));
  return events.of(id).filter((e) => e.type === "connection.approved");
}

describe("two replicas racing on one connection", () => {
  it("two caregiver approvals at once: one write wins, both answer approved, one connection.approved is published", async () => {
    const races = await Promise.all(
      Array.from({ length: 5 }, async () => {
        const { id } = await pendingConnection();
        const results = await Promise.all([a.approveConnection({ id }), b.approveConnection({ id })]);
        return { id, results };
      }),
    );
    for (const { id, results } of races) {
      expect(results.map((r) => r.result?.internalStatus)).toEqual([
        connectionv1.InternalStatus.APPROVED,
        connectionv1.InternalStatus.APPROVED,
      ]);
      // One write (version 1); its one event is counted once published (the relay runs after the answer).
      expect(await stored(id)).toMatchObject({ status: "approved", version: 1 });
      const approved = await settled(id);
      expect(approved).toHaveLength(1);
    }
  });

  it("approve on one replica and decline on the other, the decline written while the approve is held after its read: the approve's compare-and-set loses, it decides again on the declined state and approves (version 2, one event)", async () => {
    const { id } = await pendingConnection();
    const approveHeld = holdWrite(0, "approve", id);
    const approve = a.approveConnection({ id });
    await approveHeld.held;
    // Replica A has read the pending connection and waits before its write; B declines it meanwhile.
    expect((await b.declineConnection({ id })).result?.internalStatus).toBe(connectionv1.InternalStatus.DECLINED);
    approveHeld.release();
    expect((await approve).result?.internalStatus).toBe(connectionv1.InternalStatus.APPROVED);
    // A wrote twice: the held attempt lost to B's decline, the second one applied to the declined connection.
    expect(attempts[0]!.filter((k) => k === `approve ${id}`)).toHaveLength(2);
    expect(await stored(id)).toMatchObject({ status: "approved", version: 2 });
    expect(await settled(id)).toHaveLength(1);
  });

  it("approve on one replica and decline on the other, the approve written while the decline is held after its read: the decline's compare-and-set loses and, deciding again on the approved state, it is refused with FAILED_PRECONDITION (version 1, one event)", async () => {
    const { id } = await pendingConnection();
    const declineHeld = holdWrite(1, "decline", id);
    const decline = b.declineConnection({ id }).then(
      () => undefined,
      (err: unknown) => RpcError.from(err).code,
    );
    await declineHeld.held;
    expect((await a.approveConnection({ id })).result?.internalStatus).toBe(connectionv1.InternalStatus.APPROVED);
    declineHeld.release();
    expect(await decline).toBe(Status.FAILED_PRECONDITION);
    expect(attempts[1]!.filter((k) => k === `decline ${id}`)).toHaveLength(1);
    expect(await stored(id)).toMatchObject({ status: "approved", version: 1 });
    expect(await settled(id)).toHaveLength(1);
  });

  it("two caregiver approvals, the second held after its read until the first is written: its compare-and-set loses, and deciding again it finds the connection approved (one write, one connection.approved)", async () => {
    const { id } = await pendingConnection();
    const secondHeld = holdWrite(1, "approve", id);
    const second = b.approveConnection({ id });
    await secondHeld.held;
    expect((await a.approveConnection({ id })).result?.internalStatus).toBe(connectionv1.InternalStatus.APPROVED);
    secondHeld.release();
    expect((await second).result?.internalStatus).toBe(connectionv1.InternalStatus.APPROVED);
    expect(attempts[1]!.filter((k) => k === `approve ${id}`)).toHaveLength(1);
    expect(await stored(id)).toMatchObject({ status: "approved", version: 1, outbox: [] });
    expect(await settled(id)).toHaveLength(1);
  });

  it("concurrent requests for one (partner, address) on both replicas converge on one connection", async () => {
    const partnerId = newId("ptr");
    const { address } = await a.createElder({});
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        (i % 2 ? ga : gb).requestConnection({ partnerId, mode: commonv1.Mode.LIVE, elderAddress: address }),
      ),
    );
    expect(new Set(answers.map((r) => r.connection!.id)).size).toBe(1);
  });
});

describe("one caregiver act sent twice (the same act id): applied once", () => {
  const actId = () => newId("act");

  it("an approval sent again on the other replica changes nothing and answers approved (version 1, one connection.approved)", async () => {
    const { id } = await pendingConnection();
    const act = actId();
    expect((await a.approveConnection({ id, actId: act })).result?.internalStatus).toBe(
      connectionv1.InternalStatus.APPROVED,
    );
    const after = await stored(id);
    expect((await b.approveConnection({ id, actId: act })).result?.internalStatus).toBe(
      connectionv1.InternalStatus.APPROVED,
    );
    expect(await stored(id)).toMatchObject({
      status: "approved",
      version: after!.version,
      caregiverActs: [{ id: act, status: "approved" }],
    });
    expect(await settled(id)).toHaveLength(1);
  });

  it("an act repeated after a later act changed the connection answers what it did, not a refusal: an approval after a sever, a decline after an approval", async () => {
    const { id } = await pendingConnection();
    const decline = actId();
    const approve = actId();
    expect((await a.declineConnection({ id, actId: decline })).result?.internalStatus).toBe(
      connectionv1.InternalStatus.DECLINED,
    );
    expect((await b.approveConnection({ id, actId: approve })).result?.internalStatus).toBe(
      connectionv1.InternalStatus.APPROVED,
    );
    await b.severConnection({ id, actId: actId() });
    const before = await stored(id);
    expect((await a.declineConnection({ id, actId: decline })).result?.internalStatus).toBe(
      connectionv1.InternalStatus.DECLINED,
    );
    expect((await b.approveConnection({ id, actId: approve })).result?.internalStatus).toBe(
      connectionv1.InternalStatus.APPROVED,
    );
    expect(await stored(id)).toMatchObject({ status: "revoked", version: before!.version });
    // Without its id, the same approval is a new act, and refused on a revoked connection.
    await expect(a.approveConnection({ id })).rejects.toMatchObject({ code: Status.FAILED_PRECONDITION });
  });

  it("the same act on both replicas at once, one held after its read until the other wrote: the held one's compare-and-set loses and it finds its act applied (one write, one event)", async () => {
    const { id } = await pendingConnection();
    const act = actId();
    const held = holdWrite(0, "approve", id);
    const first = a.approveConnection({ id, actId: act });
    await held.held;
    expect((await b.approveConnection({ id, actId: act })).result?.internalStatus).toBe(
      connectionv1.InternalStatus.APPROVED,
    );
    held.release();
    expect((await first).result?.internalStatus).toBe(connectionv1.InternalStatus.APPROVED);
    expect(await stored(id)).toMatchObject({
      status: "approved",
      version: 1,
      caregiverActs: [{ id: act, status: "approved" }],
    });
    expect(await settled(id)).toHaveLength(1);
  });

  it("a malformed act id is INVALID_ARGUMENT and changes nothing", async () => {
    const { id } = await pendingConnection();
    await expect(a.approveConnection({ id, actId: "act_no spaces" })).rejects.toMatchObject({
      code: Status.INVALID_ARGUMENT,
    });
    expect(await stored(id)).toMatchObject({ status: "pending", version: 0 });
  });
});
