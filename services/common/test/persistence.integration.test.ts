import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient, type Collection, type Db } from "mongodb";
import { createKafka, ensureTopics, type Producer } from "../src/events/kafka.js";
import { createLogger } from "../src/runtime/logger.js";
import { endLease, renewLease, takeLease, type LeaseFields } from "../src/background/lease.js";
import {
  insertIfNew,
  insertNew,
  Outbox,
  outboxEntry,
  RELAY_STOP_MS,
  updateVersioned,
  type OutboxEntry,
  type OutboxFields,
} from "../src/store/persistence.js";
import { topicName } from "../src/events/topics.js";
import { testKafkaAdmin } from "../../../test/support/services.js";

// The persistence module on the real MongoDB-wire server and Kafka, with two "replicas": two
// MongoClients (two connection pools, as two processes have) writing the same documents at once.

const namespace = `t${randomBytes(5).toString("hex")}`;
const logger = createLogger("persistence-test", "silent");
let clients: MongoClient[];
let dbs: Db[];
let producer: Producer;

beforeAll(async () => {
  clients = await Promise.all([0, 1].map(() => MongoClient.connect(process.env.TEST_MONGODB_URI!)));
  dbs = clients.map((c) => c.db(`${namespace}_persistence`));
  const kafka = createKafka(process.env.TEST_KAFKA_BROKERS!, `${namespace}.test`, logger, testKafkaAdmin());
  await ensureTopics(kafka, namespace, ["connectionEvents"]);
  producer = kafka.producer();
});

afterAll(async () => {
  await producer?.disconnect();
  await dbs?.[0]?.dropDatabase();
  await Promise.all((clients ?? []).map((c) => c.close()));
});

/** The same collection through each replica's own client. */
const both = <T extends object>(name: string) =>
  dbs.map((db) => db.collection<T & { _id: string }>(name)) as [
    Collection<T & { _id: string }>,
    Collection<T & { _id: string }>,
  ];

describe("insert-if-new and claims by insert", () => {
  it("of 20 concurrent inserts of one _id from two replicas, exactly one reports it inserted", async () => {
    const [a, b] = both<{ by: number }>("inserts");
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => insertIfNew(i % 2 ? a : b, { _id: "one", by: i })),
    );
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(await a.countDocuments({ _id: "one" })).toBe(1);
  });

  it("insertNew returns exactly the documents whose _id was taken", async () => {
    const [a] = both<{ n: number }>("many");
    await a.insertOne({ _id: "taken", n: 0 });
    const refused = await insertNew(a, [
      { _id: "new1", n: 1 },
      { _id: "taken", n: 2 },
      { _id: "new2", n: 3 },
    ]);
    expect(refused.map((d) => d._id)).toEqual(["taken"]);
    expect(await a.countDocuments()).toBe(3);
  });

  it("one claim wins among 20 from two replicas; once expired, exactly one takes it over as a lease (insertNew, takeLease: the webhook attempt slots)", async () => {
    const [a, b] = both<{ expiresAt: Date; holder?: string | null }>("claims");
    const now = new Date();
    const expired = { _id: "slot", expiresAt: new Date(now.getTime() - 1) };
    const first = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => (await insertNew(i % 2 ? a : b, [expired])).length === 0),
    );
    expect(first.filter(Boolean)).toHaveLength(1);
    // Its lease (already over: -1 ms) ran out: 20 takers race, one wins, and the new lease holds.
    const slot = { until: "expiresAt", holder: "holder" };
    const second = await Promise.all(
      Array.from({ length: 20 }, (_, i) => takeLease(i % 2 ? a : b, { _id: "slot" }, slot, { ms: 60_000 })),
    );
    expect(second.filter(Boolean)).toHaveLength(1);
    expect(await takeLease(a, { _id: "slot" }, slot, { ms: 60_000 })).toBeNull();
  });
});

describe("versioned update", () => {
  it("no lost update: 40 read-modify-write loops from two replicas on one document all land", async () => {
    const [a, b] = both<{ version: number; items: number[] }>("versioned");
    await a.insertOne({ _id: "doc", version: 0, items: [] });
    let conflicts = 0;
    await Promise.all(
      Array.from({ length: 40 }, async (_, i) => {
        const col = i % 2 ? a : b;
        for (;;) {
          const read = (await col.findOne({ _id: "doc" }))!;
          // The decision depends on what was read: the next item is the count seen.
          if (await updateVersioned(col, read, { $push: { items: read.items.length } })) return;
          conflicts++;
        }
      }),
    );
    const final = (await a.findOne({ _id: "doc" }))!;
    expect(final.version).toBe(40);
    expect(final.items).toEqual(Array.from({ length: 40 }, (_, i) => i));
    expect(conflicts).toBeGreaterThan(0); // the writers did race
  });
});

describe("leases", () => {
  const LEASE: LeaseFields = { until: "leaseUntil", holder: "leaseToken" };
  type Leased = { state: string; takes: number; leaseUntil: Date | null; leaseToken: string | null };

  it("one of 20 concurrent takers from two replicas gets the lease; the others get null until it runs out", async () => {
    const [a, b] = both<Leased>("leases");
    await a.insertOne({ _id: "job", state: "todo", takes: 0, leaseUntil: null, leaseToken: null });
    const takes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        takeLease(i % 2 ? a : b, { _id: "job", state: "todo" }, LEASE, { ms: 60_000, update: { $inc: { takes: 1 } } }),
      ),
    );
    const winners = takes.filter((t) => t !== null);
    expect(winners).toHaveLength(1);
    expect(winners[0]!.doc).toMatchObject({ takes: 1, leaseToken: winners[0]!.holder });
    // Still held: nobody else gets it; the holder renews and ends it, writing its outcome.
    expect(await takeLease(b, { _id: "job" }, LEASE, { ms: 60_000 })).toBeNull();
    expect(await renewLease(a, "job", LEASE, winners[0]!.holder, 60_000)).toBe(true);
    expect(await renewLease(a, "job", LEASE, "someone else", 60_000)).toBe(false);
    expect(await endLease(b, "job", LEASE, winners[0]!.holder, { update: { $set: { state: "done" } } })).toMatchObject({
      state: "done",
      leaseUntil: null,
      leaseToken: null,
    });
  });

  it("a lease that ran out is taken over, and its old holder can no longer write its outcome", async () => {
    const [a, b] = both<Leased>("leases-expiry");
    await a.insertOne({ _id: "job", state: "todo", takes: 0, leaseUntil: null, leaseToken: null });
    const t0 = new Date(Date.now() - 120_000);
    const dead = (await takeLease(a, { _id: "job" }, LEASE, { now: t0, ms: 60_000 }))!;
    const next = await Promise.all([
      takeLease(a, { _id: "job" }, LEASE, { ms: 60_000 }),
      takeLease(b, { _id: "job" }, LEASE, { ms: 60_000 }),
    ]);
    expect(next.filter((t) => t !== null)).toHaveLength(1);
    expect(await endLease(a, "job", LEASE, dead.holder, { update: { $set: { state: "stale outcome" } } })).toBeNull();
    expect((await a.findOne({ _id: "job" }))!.state).toBe("todo");
  });
});

describe("outbox", () => {
  type Doc = { version: number } & OutboxFields<OutboxEntry & { n: number }>;

  it("two replicas relaying the same document at once publish each event exactly once, in order", async () => {
    const [a, b] = both<Doc>("outbox");
    const sent: string[] = [];
    const counting = {
      send: async (r: Parameters<Producer["send"]>[0]) => {
        for (const m of r.messages) sent.push(m.headers!.n as string);
        return producer.send(r);
      },
    };
    const topic = topicName(namespace, "connectionEvents");
    const outboxes = [a, b].map(
      (collection) =>
        new Outbox<Doc, OutboxEntry & { n: number }>({
          name: "test events",
          collection,
          producer: counting,
          topic,
          logger,
          key: (d) => d._id,
          value: (_d, e) => Buffer.from(String(e.n)),
          headers: (e) => ({ n: String(e.n) }),
        }),
    );
    await outboxes[0]!.ensureIndex();
    await a.insertOne({ _id: "doc", version: 0, outbox: [], relayUntil: null, relayHolder: null });
    // 10 state changes, each with its event, alternating replicas; each replica relays after its
    // writes, and both sweep meanwhile.
    const storedOrder: number[] = [];
    await Promise.all(
      Array.from({ length: 10 }, async (_, n) => {
        const col = n % 2 ? a : b;
        // A versioned write, so the position of each entry is known: the version it replaced.
        for (;;) {
          const read = (await col.findOne({ _id: "doc" }))!;
          if (await updateVersioned(col, read, { $push: { outbox: outboxEntry({ n }) } })) {
            storedOrder[read.version] = n;
            break;
          }
        }
        await Promise.all([outboxes[n % 2]!.relay("doc"), outboxes[(n + 1) % 2]!.sweep()]);
      }),
    );
    await Promise.all(outboxes.map((o) => o.relay("doc")));
    expect((await a.findOne({ _id: "doc" }))!.outbox).toEqual([]);
    // Each once, in the order the writes stored them.
    expect(sent.map(Number)).toEqual(storedOrder);
  });

  it("a failed publish leaves the entry and frees the document for the next relay", async () => {
    const [a] = both<Doc>("outbox-fail");
    const broken = { send: async () => Promise.reject(new Error("broker down")) };
    const mk = (p: Pick<Producer, "send">) =>
      new Outbox<Doc, OutboxEntry & { n: number }>({
        name: "t",
        collection: a,
        producer: p,
        topic: topicName(namespace, "connectionEvents"),
        logger,
        key: (d) => d._id,
        value: () => Buffer.from("x"),
      });
    const entry = outboxEntry({ n: 1 });
    await a.insertOne({ _id: "doc", version: 1, outbox: [entry], relayUntil: null, relayHolder: null });
    expect((await mk(broken).relay("doc")).size).toBe(0);
    expect(await a.findOne({ _id: "doc" })).toMatchObject({ outbox: [entry], relayUntil: null });
    const published = await mk(producer).relay("doc");
    expect(published.get(entry.eventId)).toMatchObject({ partition: expect.any(Number), offset: expect.any(BigInt) });
    expect((await a.findOne({ _id: "doc" }))!.outbox).toEqual([]);
  });

  it("stop waits RELAY_STOP_MS at most for a publish that hangs (Kafka gone); the entry stays stored for the next relay", async () => {
    const [a] = both<Doc>("outbox-stop");
    let publishing!: () => void;
    const started = new Promise<void>((r) => (publishing = r));
    const hanging = {
      send: () => {
        publishing();
        return new Promise<never>(() => {});
      },
    };
    const outbox = new Outbox<Doc, OutboxEntry & { n: number }>({
      name: "t",
      collection: a,
      producer: hanging,
      topic: topicName(namespace, "connectionEvents"),
      logger,
      key: (d) => d._id,
      value: () => Buffer.from("x"),
    });
    const entry = outboxEntry({ n: 1 });
    await a.insertOne({ _id: "doc", version: 1, outbox: [entry], relayUntil: null, relayHolder: null });
    outbox.afterWrite("doc");
    await started;
    const t0 = performance.now();
    await outbox.stop();
    const waited = performance.now() - t0;
    expect(waited).toBeGreaterThanOrEqual(RELAY_STOP_MS - 50);
    expect(waited).toBeLessThan(RELAY_STOP_MS + 2_000);
    expect((await a.findOne({ _id: "doc" }))!.outbox).toEqual([entry]);
  });

  it("oldest unrelayed age: the age of the oldest entry still stored, over every document; 0 once all went out", async () => {
    const [a] = both<Doc>("outbox-age");
    const outbox = new Outbox<Doc, OutboxEntry & { n: number }>({
      name: "t",
      collection: a,
      producer,
      topic: topicName(namespace, "connectionEvents"),
      logger,
      key: (d) => d._id,
      value: () => Buffer.from("x"),
    });
    await outbox.ensureIndex();
    const now = new Date();
    const at = (secondsAgo: number, n: number) => ({
      ...outboxEntry({ n }),
      occurredAt: new Date(now.getTime() - secondsAgo * 1000),
    });
    expect(await outbox.oldestUnrelayedAgeSeconds(now)).toBe(0);
    await a.insertMany([
      { _id: "newer", version: 1, outbox: [at(5, 1)], relayUntil: null, relayHolder: null },
      { _id: "older", version: 1, outbox: [at(30, 2), at(2, 3)], relayUntil: null, relayHolder: null },
      { _id: "done", version: 1, outbox: [], relayUntil: null, relayHolder: null },
    ]);
    expect(await outbox.oldestUnrelayedAgeSeconds(now)).toBeCloseTo(30);
    await outbox.relay("older");
    expect(await outbox.oldestUnrelayedAgeSeconds(now)).toBeCloseTo(5);
    await outbox.relay("newer");
    expect(await outbox.oldestUnrelayedAgeSeconds(now)).toBe(0);
  });
});
