import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { create, toBinary } from "@bufbuild/protobuf";
import { Status } from "@pi/common/rpc/errors";
import type { Producer } from "@pi/common/events/kafka";
import { MongoClient, type Db } from "mongodb";
import { authv1, eventsv1 } from "@pi/proto";
import { auditEntry, signedAuditRecord } from "@pi/common/store/audit";
import { clientsFor } from "@pi/common/rpc/clients";
import { createKafka, kafkaCredentials } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { newId } from "@pi/common/rules/ids";
import { outboxEntry } from "@pi/common/store/persistence";
import { parseOwnIdentity } from "@pi/common/rpc/service-identity";
import type { Workload } from "@pi/common/rpc/allowed-callers";
import { topicName } from "@pi/common/events/topics";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startAuthService } from "../src/service.js";
import { auditDatabaseName } from "../src/audit.js";
import type { CredentialDoc } from "../src/store.js";
import { addressOf, as, identityKey, testSettings } from "../../../test/support/services.js";

// The audit trail's store on the real MongoDB-wire server and Kafka, with two replicas of the auth
// service (each its own MongoClient) on one database: a record stored with a change reaches the
// trail even when the replica that wrote it died before publishing, and a record published twice
// is stored once (docs/security.md, "Audit trail").

type AuthClient = ReturnType<ReturnType<typeof clientsFor>["auth"]>;

let settings: Settings;
const replicas: RunningService[] = [];
let a: AuthClient;
let b: AuthClient;
let mongo: MongoClient;
let db: Db;
let producer: Producer;

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++)
    replicas.push(await startAuthService(as(settings, "auth"), createLogger(`auth-${i}`, settings.LOG_LEVEL)));
  [a, b] = replicas.map((r) => clientsFor({ ...settings, ...addressOf("auth", r) }).authAdmin());
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  db = mongo.db(databaseName(settings.DATA_NAMESPACE, "auth"));
  producer = createKafka(
    settings.KAFKA_BROKERS,
    `${settings.DATA_NAMESPACE}.audit-test`,
    createLogger("audit-test", "error"),
    kafkaCredentials(settings),
  ).producer();
});

afterAll(async () => {
  await producer?.disconnect();
  await Promise.all(replicas.map((r) => r.stop()));
  await db?.dropDatabase();
  // The local MongoDB-wire server fails to drop a database whose collection has indexes: left behind.
  await mongo?.db(`${settings.DATA_NAMESPACE}_moved`).dropDatabase();
  await mongo?.close();
});

/** The records naming `target`, once `count` of them are stored (they reach the trail through Kafka). */
async function recordsOf(target: string, count: number, client = a, timeoutMs = 30_000) {
  for (const deadline = Date.now() + timeoutMs; ; ) {
    const { records } = await client.listAuditRecords({ target });
    if (records.length >= count) return records;
    if (Date.now() > deadline)
      throw new Error(
        `timed out with ${records.length} of ${count} records for ${target}: ${JSON.stringify(records.map((r) => r.action))}`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Publishes as an outbox would, signed by the service the record names (or by `signer`, or not at
 * all); keyed by the first target, so one target's records keep their order.
 */
const publish = (record: eventsv1.AuditRecord, signer: Workload | null = record.service as Workload) => {
  const value = signer ? signedAuditRecord(record, parseOwnIdentity(identityKey(signer))) : record;
  return producer.send({
    topic: topicName(settings.DATA_NAMESPACE, "auditEvents"),
    messages: [
      { key: record.targets[0] ?? record.id, value: Buffer.from(toBinary(eventsv1.AuditRecordSchema, value)) },
    ],
  });
};

describe("the audit trail's store", () => {
  it("operator changes on two replicas are recorded with the operator as actor, newest first, on either replica", async () => {
    const partner = await a.createPartner({ name: "Audited Clinic" });
    await b.revokeCredential({ clientId: partner.live!.clientId });
    await a.setPartnerStatus({ partnerId: partner.partnerId, status: authv1.PartnerStatus.SUSPENDED });
    const records = await recordsOf(partner.partnerId, 5, b);
    expect(records.map((r) => [r.action, r.actor, r.outcome])).toEqual([
      ["partner.suspend", "operator", eventsv1.AuditOutcome.OK],
      ["credential.revoke", "operator", eventsv1.AuditOutcome.OK],
      ["credential.create", "operator", eventsv1.AuditOutcome.OK],
      ["credential.create", "operator", eventsv1.AuditOutcome.OK],
      ["partner.create", "operator", eventsv1.AuditOutcome.OK],
    ]);
    expect(records[1]!.targets).toEqual([partner.live!.clientId, partner.partnerId]);
    expect(records.every((r) => r.service === "auth")).toBe(true);
  });

  it("a record stored with a change by a replica that died before publishing reaches the trail through the sweep", async () => {
    const partner = await a.createPartner({ name: "Crashed Audit Clinic" });
    const clientId = partner.test!.clientId;
    // What RevokeCredential writes, and then nothing: the process "died" before any relay.
    const record = auditEntry("auth", {
      action: "credential.revoke",
      actor: "operator",
      targets: [clientId, partner.partnerId],
    });
    await db.collection<CredentialDoc>("credentials").updateOne(
      { _id: clientId },
      {
        $set: { status: "revoked", revokedAt: new Date() },
        $push: { outbox: outboxEntry({ kind: 1, partnerId: partner.partnerId, clientId }), audit: record },
      },
    );
    const [found] = await recordsOf(clientId, 2);
    expect(found).toMatchObject({ id: record.eventId, action: "credential.revoke", actor: "operator" });
    const doc = await db.collection<CredentialDoc>("credentials").findOne({ _id: clientId });
    expect(doc!.audit).toEqual([]);
  });

  it("a record published twice (an outbox republishing after its lease ran out) is stored once, its first copy kept", async () => {
    const target = newId("con");
    const record = create(eventsv1.AuditRecordSchema, {
      id: newId("evt"),
      occurredAt: BigInt(Date.now()),
      service: "connection",
      actor: "caregiver",
      action: "connection.decline",
      targets: [target],
      outcome: eventsv1.AuditOutcome.OK,
    });
    await publish(record);
    await publish(record);
    await publish({ ...record, action: "connection.approve" });
    // A later record of the same target, published after the copies: once it is stored, so are they.
    const sentinel = create(eventsv1.AuditRecordSchema, {
      ...record,
      id: newId("evt"),
      occurredAt: record.occurredAt + 1n,
      action: "connection.sever",
    });
    await publish(sentinel);
    await recordsOf(target, 2);
    const { records } = await a.listAuditRecords({ target });
    expect(records.map((r) => [r.id, r.action])).toEqual([
      [sentinel.id, "connection.sever"],
      [record.id, "connection.decline"],
    ]);
  });

  it("a refusal is recorded with its code, its target kept only when it is an id, and leaves nothing queued", async () => {
    const clientId = newId("cli");
    await expect(b.revokeCredential({ clientId })).rejects.toMatchObject({ code: Status.NOT_FOUND });
    const [refused] = await recordsOf(clientId, 1);
    expect(refused).toMatchObject({
      action: "credential.revoke",
      actor: "operator",
      outcome: eventsv1.AuditOutcome.REFUSED,
      reason: "not_found",
      targets: [clientId],
    });
    for (
      const deadline = Date.now() + 10_000;
      (await db.collection("audit_outbox").countDocuments()) > 0 && Date.now() < deadline;
    ) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await db.collection("audit_outbox").countDocuments()).toBe(0);
  });

  it("a malformed record on the topic is skipped, and the records after it are stored", async () => {
    const target = newId("ptr");
    const good = (action: string) =>
      create(eventsv1.AuditRecordSchema, {
        id: newId("evt"),
        occurredAt: BigInt(Date.now()),
        service: "auth",
        actor: "operator",
        action,
        targets: [target],
        outcome: eventsv1.AuditOutcome.OK,
      });
    await publish(
      create(eventsv1.AuditRecordSchema, {
        ...good("partner.suspend"),
        targets: [target, "amber.falcon.river@elders.example"],
      }),
    );
    await publish(good("partner.reinstate"));
    const records = await recordsOf(target, 1);
    expect(records.map((r) => r.action)).toEqual(["partner.reinstate"]);
  });

  it("filters by time and limits the count", async () => {
    const partner = await a.createPartner({ name: "Filtered Clinic" });
    await recordsOf(partner.partnerId, 3);
    const since = BigInt(Date.now());
    await a.setPartnerStatus({ partnerId: partner.partnerId, status: authv1.PartnerStatus.SUSPENDED });
    await recordsOf(partner.partnerId, 4);
    expect((await a.listAuditRecords({ target: partner.partnerId, since })).records.map((r) => r.action)).toEqual([
      "partner.suspend",
    ]);
    expect((await a.listAuditRecords({ target: partner.partnerId, limit: 2 })).records).toHaveLength(2);
    await expect(a.listAuditRecords({ limit: 1001 })).rejects.toMatchObject({ code: Status.INVALID_ARGUMENT });
    await expect(a.listAuditRecords({ target: "amber.falcon.river@elders.example" })).rejects.toMatchObject({
      code: Status.INVALID_ARGUMENT,
    });
  });

  it("the audit trail accepts a record only from the service that owns that kind: a record of another service's kind, one signed by a service it does not name, and an unsigned one are dropped", async () => {
    const target = newId("cli");
    const record = (fields: Partial<eventsv1.AuditRecord>) =>
      create(eventsv1.AuditRecordSchema, {
        id: newId("evt"),
        occurredAt: BigInt(Date.now()),
        actor: "operator",
        action: "credential.revoke",
        targets: [target],
        outcome: eventsv1.AuditOutcome.OK,
        ...fields,
      });
    // The connection service (which may write the topic) claims a kind it does not own...
    await publish(record({ service: "connection" }), "connection");
    // ...or names the auth service, which never signed it...
    await publish(record({ service: "auth" }), "connection");
    await publish(record({ service: "auth" }), null);
    // ...and the webhook service signs as itself a connection record.
    await publish(record({ service: "webhook", action: "connection.approve", actor: "caregiver" }), "webhook");
    // The sentinel: auth's own record, published after them on the same partition.
    const sentinel = record({ service: "auth", action: "credential.create" });
    await publish(sentinel, "auth");
    await recordsOf(target, 1);
    expect((await a.listAuditRecords({ target })).records.map((r) => [r.id, r.service, r.action])).toEqual([
      [sentinel.id, "auth", "credential.create"],
    ]);
  });

  it("the trail lives in its own database (where the auth service's user may only find and insert)", async () => {
    const partner = await a.createPartner({ name: "Own Database Clinic" });
    await recordsOf(partner.partnerId, 3);
    expect(
      await mongo
        .db(auditDatabaseName(settings.DATA_NAMESPACE))
        .collection("audit_records")
        .countDocuments({ targets: partner.partnerId }),
    ).toBe(3);
    expect(await db.collection("audit_records").countDocuments()).toBe(0);
  });
});
