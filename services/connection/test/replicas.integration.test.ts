import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Code, ConnectError } from "@connectrpc/connect";
import { MongoClient } from "mongodb";
import { clientsFor, createLogger, databaseName, newId, type RunningService, type Settings } from "@pi/common";
import { commonv1, connectionv1 } from "@pi/proto";
import { startConnectionService } from "../src/service.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";
import { collectConnectionEvents, type EventCollector } from "../../../test/support/connection-events.js";

// Two replicas of the connection service (two started instances, each with its own MongoClient) on
// one database, racing on one connection. Only single-document atomic updates keep them right: no
// lock is shared, none exists.

type Client = ReturnType<ReturnType<typeof clientsFor>["connection"]>;

let settings: Settings;
const replicas: RunningService[] = [];
let a: Client;
let b: Client;
let ga: Client;
let gb: Client;
let events: EventCollector;
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++) replicas.push(await startConnectionService(settings, createLogger(`connection-${i}`, settings.LOG_LEVEL)));
  // a, b: the caregiver's acts and elders (the operator CLI's identity); ga, gb: partners' requests (the gateway's).
  [a, b] = replicas.map((r) => clientsFor({ ...settings, ...addressOf("connection", r) }).connectionAdmin());
  [ga, gb] = replicas.map((r) => clientsFor({ ...as(settings, "gateway"), CONNECTION_SERVICE_URL: `http://127.0.0.1:${r.port}` }).connection());
  events = await collectConnectionEvents(settings.KAFKA_BROKERS, settings.DATA_NAMESPACE);
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await events?.stop();
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "connection")).dropDatabase();
  await mongo?.close();
});

const stored = (id: string) => mongo.db(databaseName(settings.DATA_NAMESPACE, "connection")).collection("connections").findOne({ _id: id as never });

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
      expect(results.map((r) => r.result?.internalStatus)).toEqual([connectionv1.InternalStatus.APPROVED, connectionv1.InternalStatus.APPROVED]);
      expect(await stored(id)).toMatchObject({ status: "approved", version: 1, outbox: [] });
      const approved = await settled(id);
      expect(approved).toHaveLength(1);
    }
  });

  it("approve on one replica and decline on the other: the decline that comes second gets FAILED_PRECONDITION; the connection ends approved with one event", async () => {
    for (let round = 0; round < 6; round++) {
      const { id } = await pendingConnection();
      const [approve, decline] = await Promise.allSettled([a.approveConnection({ id }), b.declineConnection({ id })]);
      expect(approve.status).toBe("fulfilled");
      if (decline.status === "rejected") {
        expect(ConnectError.from(decline.reason).code).toBe(Code.FailedPrecondition);
      }
      // approve after decline: version 2 (declined, then approved); decline refused: version 1.
      const doc = await stored(id);
      expect(doc).toMatchObject({ status: "approved", version: decline.status === "rejected" ? 1 : 2 });
      expect(await settled(id)).toHaveLength(1);
    }
  });

  it("concurrent requests for one (partner, address) on both replicas converge on one connection", async () => {
    const partnerId = newId("ptr");
    const { address } = await a.createElder({});
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => (i % 2 ? ga : gb).requestConnection({ partnerId, mode: commonv1.Mode.LIVE, elderAddress: address })),
    );
    expect(new Set(answers.map((r) => r.connection!.id)).size).toBe(1);
  });
});
