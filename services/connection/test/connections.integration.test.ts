import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import type { Producer } from "@pi/common/events/kafka";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { createKafka, ensureTopics } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { newId } from "@pi/common/rules/ids";
import { parseSettings, type Settings } from "@pi/common/runtime/settings";
import { sandboxElderAddress } from "@pi/common/rules/elder-address";
import { topicName } from "@pi/common/events/topics";
import { commonv1 } from "@pi/proto";
import { Connections } from "../src/connections.js";
import { queryPlan } from "../../../test/support/query-plan.js";
import { testKafkaAdmin } from "../../../test/support/services.js";
import { connectionOutbox } from "../src/outbox.js";
import { openConnectionStore, type ConnectionStore } from "../src/store.js";
import { collectConnectionEvents, type EventCollector } from "../../../test/support/connection-events.js";

// The connection store, the state machine and the outbox relay on the real MongoDB-wire server and Kafka, with
// a clock the tests move, so windows and delays pass without waiting.

const ttl = 100;
const delay = 30;
let settings: Settings;
let mongo: Mongo;
let store: ConnectionStore;
let producer: Producer;
let relay: ReturnType<typeof connectionOutbox>;
let collector: EventCollector;
let clock = new Date();
let connections: Connections;
let topic: string;
const logger = createLogger("connection-test", "silent");

const word = () =>
  Array.from(randomBytes(6))
    .map((b) => String.fromCharCode(97 + (b % 26)))
    .join("");
const address = () => `${word()}.${word()}.${word()}@${settings.ADDRESS_DOMAIN}`;
const partner = () => newId("ptr");
const tick = (seconds: number) => {
  clock = new Date(clock.getTime() + seconds * 1000);
};
async function elder(): Promise<string> {
  const a = address();
  await store.elders.insertOne({ _id: a, elderId: newId("eld"), createdAt: new Date() });
  return a;
}
const stored = (id: string) => store.connections.findOne({ _id: id });
/** A Connections whose relay never runs: the process "died" right after the write. */
const withoutRelay = () =>
  new Connections(
    store,
    settings,
    () => undefined,
    () => clock,
  );
const relaying = (outbox: typeof relay) => (id: string) => outbox.afterWrite(id);

beforeAll(async () => {
  settings = parseSettings({
    MONGODB_URI: process.env.TEST_MONGODB_URI,
    KAFKA_BROKERS: process.env.TEST_KAFKA_BROKERS,
    DATA_NAMESPACE: `t${randomBytes(5).toString("hex")}`,
    CONNECTION_PENDING_TTL_SECONDS: String(ttl),
    SANDBOX_APPROVAL_DELAY_SECONDS: String(delay),
  });
  mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "connection"));
  store = await openConnectionStore(mongo.db);
  await store.elders.insertOne({
    _id: sandboxElderAddress(settings.ADDRESS_DOMAIN),
    elderId: "eld_sandbox",
    createdAt: new Date(),
  });
  const kafka = createKafka(settings.KAFKA_BROKERS, "connection-test", logger, testKafkaAdmin());
  await ensureTopics(kafka, settings.DATA_NAMESPACE, ["connectionEvents"]);
  producer = kafka.producer();
  topic = topicName(settings.DATA_NAMESPACE, "connectionEvents");
  relay = connectionOutbox(store.connections, producer, topic, logger);
  await relay.ensureIndex();
  connections = new Connections(store, settings, relaying(relay), () => clock);
  collector = await collectConnectionEvents(settings.KAFKA_BROKERS, settings.DATA_NAMESPACE);
});

afterAll(async () => {
  await relay?.drain();
  await collector?.stop();
  await producer?.disconnect();
  await mongo?.db.dropDatabase();
  await mongo?.close();
});

describe("creating connections", () => {
  it("concurrent creates: ten simultaneous requests for one (partner, address) give one id", async () => {
    const p = partner();
    for (const a of [await elder(), address()]) {
      const docs = await Promise.all(Array.from({ length: 10 }, () => connections.request(p, "live", a)));
      expect(new Set(docs.map((d) => d._id)).size).toBe(1);
      expect(await store.connections.countDocuments({ partnerId: p, address: a })).toBe(1);
    }
  });

  it("the same (partner, address) returns the same id; another partner or the other mode gets its own", async () => {
    const a = await elder();
    const p = partner();
    const first = await connections.request(p, "live", a);
    expect((await connections.request(p, "live", a))._id).toBe(first._id);
    expect((await connections.request(partner(), "live", a))._id).not.toBe(first._id);
    expect((await connections.request(p, "test", a))._id).not.toBe(first._id);
  });

  it("stores the resolution under the mode's rule: a test token resolves only the sandbox elder, a live token every elder but it", async () => {
    const real = await elder();
    const sandbox = sandboxElderAddress(settings.ADDRESS_DOMAIN);
    const p = partner();
    expect((await connections.request(p, "live", real)).elderId).toMatch(/^eld_/);
    expect((await connections.request(p, "test", real)).elderId).toBeNull();
    expect((await connections.request(p, "live", sandbox)).elderId).toBeNull();
    const sandboxed = await connections.request(p, "test", sandbox);
    expect(sandboxed).toMatchObject({ elderId: "eld_sandbox", approveAt: new Date(clock.getTime() + delay * 1000) });
  });
});

describe("outbox", () => {
  it("a state change and its event are stored in one document update; the relay publishes it and then removes it", async () => {
    const p = partner();
    const c = await connections.request(p, "live", await elder());
    const dying = withoutRelay();
    await dying.apply({ _id: c._id }, "approve", { resolve: true });
    const doc = await stored(c._id);
    expect(doc).toMatchObject({
      status: "approved",
      outbox: [{ type: "connection.approved", status: "approved", eventId: expect.stringMatching(/^evt_/) }],
    });
    expect(collector.of(c._id)).toEqual([]);

    const eventId = doc!.outbox[0]!.eventId;
    expect(await relay.sweep()).toBeGreaterThanOrEqual(1);
    await collector.waitFor(() => collector.of(c._id).length === 1);
    const [published] = collector.events.filter((e) => e.event.connectionId === c._id);
    expect(published!.key).toBe(p);
    expect(published!.event).toMatchObject({
      eventId,
      type: "connection.approved",
      partnerId: p,
      connectionId: c._id,
      status: "approved",
      mode: commonv1.Mode.LIVE,
      occurredAt: BigInt(doc!.outbox[0]!.occurredAt.getTime()),
    });
    expect((await stored(c._id))!.outbox).toEqual([]);

    await relay.sweep();
    await collector.sentinel(p);
    expect(collector.of(c._id)).toHaveLength(1);
  });

  it("a failed publish keeps the entry, and a later relay publishes it", async () => {
    const c = await connections.request(partner(), "live", await elder());
    const broken = { send: async () => Promise.reject(new Error("broker down")) } as unknown as Producer;
    const brokenRelay = connectionOutbox(store.connections, broken, topic, logger);
    const dying = new Connections(store, settings, relaying(brokenRelay), () => clock);
    await dying.apply({ _id: c._id }, "approve", { resolve: true });
    await brokenRelay.drain();
    expect((await stored(c._id))!.outbox).toHaveLength(1);
    await relay.relay(c._id);
    await collector.waitFor(() => collector.of(c._id).length === 1);
    expect((await stored(c._id))!.outbox).toEqual([]);
  });

  it("an event stored while the previous one is being published is neither lost nor reordered", async () => {
    const p = partner();
    const c = await connections.request(p, "live", await elder());
    let interleaved = false;
    const interleaving = {
      send: async (record: Parameters<Producer["send"]>[0]) => {
        if (!interleaved) {
          interleaved = true;
          // The partner revokes while the approval is on its way to Kafka.
          await racing.apply({ _id: c._id, partnerId: p }, "delete");
        }
        return producer.send(record);
      },
    } as unknown as Producer;
    const racingRelay = connectionOutbox(store.connections, interleaving, topic, logger);
    const racing: Connections = new Connections(store, settings, relaying(racingRelay), () => clock);
    await racing.apply({ _id: c._id }, "approve", { resolve: true });
    await collector.waitFor(() => collector.of(c._id).length >= 2);
    await racingRelay.drain();
    expect(collector.of(c._id).map((e) => e.type)).toEqual(["connection.approved", "connection.revoked"]);
    expect((await stored(c._id))!.outbox).toEqual([]);
  });
});

describe("sandbox auto-approval", () => {
  it("approves once due, claimed exactly once when two rounds run at the same time, with one connection.approved", async () => {
    const c = await connections.request(partner(), "test", sandboxElderAddress(settings.ADDRESS_DOMAIN));
    expect(await connections.approveDue()).toBe(0);
    tick(delay);
    // Other tests' sandbox connections may be due too; each must be claimed exactly once.
    const due = await store.connections.countDocuments({ status: "pending", mode: "test", approveAt: { $lte: clock } });
    const other = new Connections(store, settings, relaying(relay), () => clock);
    const counts = await Promise.all([connections.approveDue(), other.approveDue()]);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(due);
    expect(await stored(c._id)).toMatchObject({ status: "approved", approveAt: null });
    await collector.waitFor(() => collector.of(c._id).length === 1);
    expect(collector.of(c._id)[0]).toMatchObject({
      type: "connection.approved",
      status: "approved",
      mode: commonv1.Mode.TEST,
    });
    await relay.drain();
    await collector.sentinel(c.partnerId);
    expect(collector.of(c._id)).toHaveLength(1);
  });

  it("one round drains a burst larger than its batch: as many partners' sandbox connections as the bound, made at once, two replicas' rounds at once, each approved exactly once", async () => {
    const count = 120;
    const made = await Promise.all(
      Array.from({ length: count }, () =>
        connections.request(partner(), "test", sandboxElderAddress(settings.ADDRESS_DOMAIN)),
      ),
    );
    tick(delay);
    const due = await store.connections.countDocuments({ status: "pending", mode: "test", approveAt: { $lte: clock } });
    expect(due).toBeGreaterThanOrEqual(count);
    const other = new Connections(store, settings, relaying(relay), () => clock);
    // Batches of 50: each round goes on while its batches come back full.
    const counts = await Promise.all([connections.approveDue(50), other.approveDue(50)]);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(due);
    expect(
      await store.connections.countDocuments({ status: "pending", mode: "test", approveAt: { $lte: clock } }),
    ).toBe(0);
    for (const c of made) expect(await stored(c._id)).toMatchObject({ status: "approved", approveAt: null });
    await collector.waitFor(() => made.every((c) => collector.of(c._id).length >= 1));
    await relay.drain();
    for (const c of made) expect(collector.of(c._id).map((e) => e.type)).toEqual(["connection.approved"]);
  });

  it("concurrent acts on one connection are applied one after the other: one event per state change, none lost", async () => {
    const p = partner();
    const cs = await Promise.all(Array.from({ length: 5 }, async () => connections.request(p, "live", await elder())));
    // For each connection: approve and delete race, five times over, with repeats of both.
    await Promise.all(
      cs.flatMap((c) => [
        connections.apply({ _id: c._id }, "approve", { resolve: true }),
        connections.apply({ _id: c._id }, "approve", { resolve: true }),
        connections.apply({ _id: c._id, partnerId: p }, "delete"),
        connections.apply({ _id: c._id, partnerId: p }, "delete"),
      ]),
    );
    await relay.drain();
    // A sentinel of the same partner (same key, same partition) published after every relay above.
    const sentinel = await connections.request(p, "live", await elder());
    await connections.apply({ _id: sentinel._id }, "approve", { resolve: true });
    await collector.waitFor(() => collector.of(sentinel._id).length === 1);
    for (const c of cs) {
      const doc = (await stored(c._id))!;
      expect(doc).toMatchObject({ status: "revoked", outbox: [] });
      // Approved first (then revoked): two changes, two events. Deleted first: one change, no
      // event, and the approvals that came after were refused.
      if (doc.version === 2)
        expect(collector.of(c._id).map((e) => e.type)).toEqual(["connection.approved", "connection.revoked"]);
      else expect({ version: doc.version, events: collector.of(c._id) }).toEqual({ version: 1, events: [] });
    }
  });

  it("test token + real address and live token + sandbox address are never scheduled", async () => {
    const p = partner();
    const a = await connections.request(p, "test", await elder());
    const b = await connections.request(p, "live", sandboxElderAddress(settings.ADDRESS_DOMAIN));
    tick(delay + 1);
    await connections.approveDue();
    expect((await stored(a._id))!.status).toBe("pending");
    expect((await stored(b._id))!.status).toBe("pending");
  });
});

describe("expiry", () => {
  it("reads expired once the window ends, before the sweep; the sweep persists it without an event", async () => {
    const p = partner();
    const pending = await connections.request(p, "live", await elder());
    const declined = await connections.request(p, "live", await elder());
    await connections.apply({ _id: declined._id }, "decline");
    const unresolved = await connections.request(p, "live", address());
    tick(ttl);
    for (const c of [pending, declined, unresolved]) {
      const doc = (await stored(c._id))!;
      expect(doc.status).not.toBe("expired");
      expect(connections.external(doc)).toBe("expired");
    }
    expect(await connections.expireDue()).toBeGreaterThanOrEqual(3);
    for (const c of [pending, declined, unresolved]) expect((await stored(c._id))!.status).toBe("expired");
    await relay.drain();
    await collector.sentinel(p);
    for (const c of [pending, declined, unresolved]) expect(collector.of(c._id)).toEqual([]);
  });

  it("a request for an expired connection opens a new pending window under the same id", async () => {
    const p = partner();
    const a = await elder();
    const c = await connections.request(p, "live", a);
    tick(ttl);
    await connections.expireDue();
    const again = await connections.request(p, "live", a);
    expect(again).toMatchObject({ _id: c._id, status: "pending", pendingSince: clock });
    expect(connections.external(again)).toBe("pending");
  });
});

describe("caregiver consent needs a resolved elder", () => {
  it("an address that did not resolve cannot be approved; once the elder exists, it can", async () => {
    const p = partner();
    const a = address();
    const c = await connections.request(p, "live", a);
    expect((await connections.apply({ _id: c._id }, "approve", { resolve: true }))!.outcome.kind).toBe("refused");
    await store.elders.insertOne({ _id: a, elderId: newId("eld"), createdAt: new Date() });
    const approved = await connections.apply({ _id: c._id }, "approve", { resolve: true });
    expect(approved!.outcome).toMatchObject({ kind: "change", to: "approved" });
    expect(approved!.doc.elderId).toMatch(/^eld_/);
  });
});

describe("CheckActiveConnection", () => {
  it("active only for an approved connection of that partner, in that mode, to that address", async () => {
    const p = partner();
    const a = await elder();
    const c = await connections.request(p, "live", a);
    expect(await connections.isActive(p, "live", a)).toBe(false);
    await connections.apply({ _id: c._id }, "approve", { resolve: true });
    expect(await connections.isActive(p, "live", a)).toBe(true);
    expect(await connections.isActive(partner(), "live", a)).toBe(false);
    expect(await connections.isActive(p, "test", a)).toBe(false);
    expect(await connections.isActive(p, "live", await elder())).toBe(false);
    await connections.apply({ _id: c._id }, "sever");
    expect(await connections.isActive(p, "live", a)).toBe(false);
  });
});

describe("polls in batches (readMany)", () => {
  it("each filter gets its owner's connection, in order; an unknown id, another partner's, the other mode's and no filter get null alike", async () => {
    const [p, other] = [partner(), partner()];
    const mine = await connections.request(p, "live", await elder());
    const theirs = await connections.request(other, "live", await elder());
    const own = (id: string, partnerId = p, mode: "live" | "test" = "live") => ({ _id: id, partnerId, mode });
    const docs = await connections.readMany([
      own(theirs._id),
      own(mine._id),
      own("con_unknown"),
      own(mine._id, p, "test"),
      null,
      own(mine._id),
    ]);
    expect(docs.map((d) => d?._id ?? null)).toEqual([null, mine._id, null, null, null, mine._id]);
    expect(await connections.readMany([null])).toEqual([null]);
  });
});

describe("hot reads use an index", () => {
  it("the connection check reads by (partner, mode, address), the fields of the unique index; the elder lookup by _id", async () => {
    const p = partner();
    const a = await elder();
    await connections.request(p, "live", a);
    const check = await queryPlan(store.connections as never, { partnerId: p, mode: "live", address: a });
    expect(check).toMatchObject({ usesIndex: true });
    expect(await queryPlan(store.elders as never, { _id: a })).toMatchObject({ usesIndex: true });
    // The check can fail: a partner and mode without the address are no index's fields.
    expect((await queryPlan(store.connections as never, { partnerId: p, mode: "live" })).usesIndex).toBe(false);
  });
});
