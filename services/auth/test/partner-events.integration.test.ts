import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { fromBinary } from "@bufbuild/protobuf";
import { MongoClient } from "mongodb";
import { authv1, eventsv1 } from "@pi/proto";
import { clientsFor } from "@pi/common/rpc/clients";
import { kafkaCredentials } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { outboxEntry } from "@pi/common/store/persistence";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startAuthService } from "../src/service.js";
import type { CredentialDoc } from "../src/store.js";
import { addressOf, testSettings } from "../../../test/support/services.js";
import { readTopic, type TopicReader } from "../../../test/support/topic-reader.js";

// Partner events go through the outbox: stored with the change, published right after it, and by
// the sweep when the process that wrote it died first. Two replicas of the auth service (each its
// own MongoClient) change one partner at once: the last event on the topic is the state stored.

const { PartnerEventKind } = eventsv1;
type AuthClient = ReturnType<ReturnType<typeof clientsFor>["auth"]>;

let settings: Settings;
const replicas: RunningService[] = [];
let a: AuthClient;
let b: AuthClient;
let mongo: MongoClient;
let reader: TopicReader<eventsv1.PartnerEvent>;
/** The partner events read so far, in topic order. */
const seen = () => reader.records.map((r) => r.value);
const waitFor = (predicate: () => boolean) => reader.waitFor(predicate, 20_000);

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++)
    replicas.push(await startAuthService(settings, createLogger(`auth-${i}`, settings.LOG_LEVEL)));
  [a, b] = replicas.map((r) => clientsFor({ ...settings, ...addressOf("auth", r) }).authAdmin());
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  reader = await readTopic(
    settings.KAFKA_BROKERS,
    settings.DATA_NAMESPACE,
    "partnerEvents",
    (value) => fromBinary(eventsv1.PartnerEventSchema, value),
    {
      credentials: kafkaCredentials(settings),
      describe: (e) => [e.kind, e.partnerId, e.clientId],
    },
  );
});

afterAll(async () => {
  await reader?.stop();
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "auth")).dropDatabase();
  await mongo?.close();
});

const credentials = () =>
  mongo.db(databaseName(settings.DATA_NAMESPACE, "auth")).collection<CredentialDoc>("credentials");

describe("partner events through the outbox", () => {
  it("a revocation is published before the command returns, and leaves no entry behind", async () => {
    const partner = await a.createPartner({ name: "Outbox Clinic" });
    const clientId = partner.live!.clientId;
    await b.revokeCredential({ clientId });
    await waitFor(() => seen().some((e) => e.kind === PartnerEventKind.CREDENTIAL_REVOKED && e.clientId === clientId));
    expect(await credentials().findOne({ _id: clientId })).toMatchObject({ status: "revoked", outbox: [] });
  });

  it("a revocation stored by a replica that died before publishing is published by the sweep", async () => {
    const partner = await a.createPartner({ name: "Crashed Revocation Clinic" });
    const clientId = partner.test!.clientId;
    // What RevokeCredential writes, and then nothing: the process "died" before its publish.
    const entry = outboxEntry({ kind: PartnerEventKind.CREDENTIAL_REVOKED, partnerId: partner.partnerId, clientId });
    await credentials().updateOne(
      { _id: clientId },
      { $set: { status: "revoked", revokedAt: new Date() }, $push: { outbox: entry } },
    );
    await waitFor(() => seen().some((e) => e.clientId === clientId));
    expect(seen().find((e) => e.clientId === clientId)).toMatchObject({
      kind: PartnerEventKind.CREDENTIAL_REVOKED,
      partnerId: partner.partnerId,
    });
    let left = (await credentials().findOne({ _id: clientId }))!.outbox.length;
    for (const deadline = Date.now() + 5_000; left > 0 && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 25));
      left = (await credentials().findOne({ _id: clientId }))!.outbox.length;
    }
    expect(left).toBe(0);
  });

  it("suspend and reinstate racing on two replicas: the last event published for the partner is the status stored", async () => {
    const { partnerId } = await a.createPartner({ name: "Racing Clinic" });
    const { ACTIVE, SUSPENDED } = authv1.PartnerStatus;
    const answers = [];
    for (let round = 0; round < 4; round++) {
      answers.push(
        ...(await Promise.all([
          a.setPartnerStatus({ partnerId, status: SUSPENDED }),
          b.setPartnerStatus({ partnerId, status: ACTIVE }),
        ])),
      );
    }
    // Each answer waited for both auth replicas (the feed's followers here), also when the other
    // replica's relay published its event (both events ride on the one partner document): either
    // both confirmed, or it waited out its 1.2 s (a loaded machine), never an answer at once.
    const waited = answers.map((r) => r.propagation!.authConfirmed === 2 || r.propagation!.elapsedMs >= 1_200n);
    expect(answers.map((r) => r.propagation?.authReplicas)).toEqual(answers.map(() => 2));
    expect(waited).toEqual(answers.map(() => true));
    // Every change has its event: 8 of them, in the order they were stored.
    await waitFor(
      () => seen().filter((e) => e.partnerId === partnerId && e.kind !== PartnerEventKind.WEBHOOK_CHANGED).length === 8,
    );
    const partner = await mongo
      .db(databaseName(settings.DATA_NAMESPACE, "auth"))
      .collection("partners")
      .findOne({ _id: partnerId as never });
    const last = seen()
      .filter((e) => e.partnerId === partnerId)
      .at(-1)!;
    expect(last.kind).toBe(
      partner!.status === "active" ? PartnerEventKind.PARTNER_REINSTATED : PartnerEventKind.PARTNER_SUSPENDED,
    );
    expect(partner!.outbox).toEqual([]);
  });
});
