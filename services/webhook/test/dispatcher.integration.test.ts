import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomBytes, randomUUID } from "node:crypto";
import { connectMongo, type Mongo } from "@pi/common/store/mongo";
import { createLogger } from "@pi/common/runtime/logger";
import type { AuthClient } from "@pi/common/rpc/clients";
import { storeWebhookEvents, webhookEventDoc } from "../src/consumer.js";
import { Dispatcher } from "../src/dispatcher.js";
import { WebhookSender } from "../src/outbound.js";
import { openWebhookStore, type WebhookStore } from "../src/store.js";
import { startTestReceiver, type Behaviour, type TestReceiver } from "../../../test/support/webhook-receiver.js";
import { eventually } from "./harness.js";

// The dispatcher on the real MongoDB-wire server with real HTTP receivers. Only the auth service's answer
// (where a partner's webhooks go) is stood in for.

let mongo: Mongo;
let store: WebhookStore;
const receivers: TestReceiver[] = [];
const targets = new Map<string, { webhookUrl: string; signingSecret: string }>();
const auth = {
  getWebhookTarget: async ({ partnerId }: { partnerId: string }) => ({
    partnerId,
    previousSigningSecrets: [],
    ...(targets.get(partnerId) ?? { webhookUrl: "", signingSecret: "" }),
  }),
} as unknown as AuthClient;
const logger = createLogger("dispatcher-test", process.env.TEST_LOG_LEVEL ?? "error");
const policy = { baseSeconds: 0.2, windowSeconds: 60, attemptTimeoutSeconds: 3 };

async function partner(behaviour?: Behaviour) {
  const id = `ptr_${randomBytes(6).toString("hex")}`;
  const secret = `whsec_${randomBytes(8).toString("hex")}`;
  const receiver = await startTestReceiver(secret, behaviour);
  receivers.push(receiver);
  targets.set(id, { webhookUrl: receiver.url, signingSecret: secret });
  return { id, receiver };
}

const store1 = (partnerId: string, into = store) =>
  storeWebhookEvents(into, [
    webhookEventDoc(
      {
        ok: true,
        sourceEventId: randomUUID(),
        partnerId,
        connectionId: `con_${randomBytes(6).toString("hex")}`,
        type: "connection.approved",
        status: "approved",
        occurredAtMs: Date.now(),
      },
      "live",
      new Date(),
      0,
    ),
  ]);

function dispatcher(o: { maxInFlight?: number; maxPerPartner?: number; idleMs?: number; store?: WebhookStore } = {}) {
  const sender = new WebhookSender({ allowInsecure: true, timeoutMs: policy.attemptTimeoutSeconds * 1000 });
  const d = new Dispatcher({ store, auth, sender, policy, logger, ...o });
  return {
    d,
    sender,
    stop: async () => {
      await d.stop(200, () => sender.agent.destroy());
      await sender.agent.close().catch(() => {});
    },
  };
}

beforeAll(async () => {
  mongo = await connectMongo(process.env.TEST_MONGODB_URI!, `t${randomBytes(5).toString("hex")}_webhook`);
  store = await openWebhookStore(mongo.db);
});
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.close()));
  await mongo.db.dropDatabase().catch(() => {});
  await mongo.close();
});

describe("webhook dispatcher", () => {
  it("one partner's dead endpoint holds at most its share of the slots; another partner's events go out meanwhile", async () => {
    const dead = await partner(() => "hang");
    const healthy = await partner();
    for (let i = 0; i < 10; i++) await store1(dead.id);
    for (let i = 0; i < 3; i++) await store1(healthy.id);
    const { d, stop } = dispatcher({ maxInFlight: 4, maxPerPartner: 2 });
    d.start();
    try {
      await healthy.receiver.waitFor((a) => a.length >= 3, 10_000, "the healthy partner's events");
      expect(dead.receiver.arrivals.length).toBeLessThanOrEqual(2);
      const deadDocs = await store.events.find({ partnerId: dead.id }).toArray();
      expect(deadDocs.every((x) => x.attempts === 0)).toBe(true);
    } finally {
      await stop();
    }
  });

  it("an attempt cut off by a stop is not counted, and its event is due again at once", async () => {
    const p = await partner(() => "hang");
    await store1(p.id);
    const { d, stop } = dispatcher();
    d.start();
    await p.receiver.waitFor((a) => a.length >= 1);
    await stop();
    const [doc] = await store.events.find({ partnerId: p.id }).toArray();
    expect(doc).toMatchObject({ state: "pending", attempts: 0, attemptLog: [] });
    const entry = await store.queue.findOne({ _id: doc!._id });
    expect(entry).toMatchObject({ attempts: 0 });
    expect(entry!.dueAt.getTime()).toBeLessThanOrEqual(Date.now());
  });

  it("a slot claimed by a live replica is left alone; one whose holder died before moving the event on is taken over", async () => {
    const p = await partner();
    await store1(p.id);
    await store1(p.id);
    const [held, first] = await store.queue.find({ partnerId: p.id }).toArray();
    // Its holder claimed it a minute ago, when it came due, and died before taking the lease.
    await store.queue.updateOne({ _id: first!._id }, { $set: { dueAt: new Date(Date.now() - 60_000) } });
    const orphaned = await store.queue.findOne({ _id: first!._id });
    const slot = (entry: typeof held) => `${entry!._id}:${entry!.attempts}:${entry!.dueAt.getTime()}`;
    await store.claims.insertOne({ _id: slot(held), eventId: held!._id, expiresAt: new Date(Date.now() + 60_000) });
    await store.claims.insertOne({ _id: slot(orphaned), eventId: orphaned!._id, expiresAt: new Date(Date.now() - 1) });
    const { d, stop } = dispatcher();
    d.start();
    try {
      await p.receiver.waitFor((a) => a.length >= 1);
      // Sentinel: an event stored now is due after the held one (attempts go in due order), so once
      // it has arrived the held one was passed over, not merely not reached yet.
      await store1(p.id);
      d.poke(); // as the consumer does once it has stored events
      await p.receiver.waitFor((a) => a.length >= 2, 10_000, "the later event");
      expect(p.receiver.arrivals.map((a) => a.event.id)).toEqual([
        orphaned!._id,
        expect.not.stringMatching(`^${held!._id}$`),
      ]);
      const heldNow = await store.events.findOne({ _id: held!._id });
      expect(heldNow).toMatchObject({ state: "pending", attempts: 0 });
    } finally {
      await stop();
    }
  });

  it("two dispatchers on the same events deliver each exactly once", async () => {
    const p = await partner();
    for (let i = 0; i < 30; i++) await store1(p.id);
    const a = dispatcher();
    const b = dispatcher();
    a.d.start();
    b.d.start();
    try {
      await p.receiver.waitFor((x) => new Set(x.map((y) => y.event.id)).size >= 30, 20_000, "30 events");
      await eventually(async () =>
        (await store.events.countDocuments({ partnerId: p.id, state: "delivered" })) === 30 ? true : undefined,
      );
      expect(p.receiver.arrivals).toHaveLength(30);
      expect(p.receiver.arrivals.every((x) => x.nth === 1)).toBe(true);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });
});

describe("webhook dispatcher when idle", () => {
  // A database of its own: no other test's entries come due here.
  let own: Mongo;
  let quiet: WebhookStore;
  beforeAll(async () => {
    own = await connectMongo(process.env.TEST_MONGODB_URI!, `t${randomBytes(5).toString("hex")}_webhook`);
    quiet = await openWebhookStore(own.db);
  });
  afterAll(async () => {
    await own.db.dropDatabase().catch(() => {});
    await own.close();
  });

  it("sleeps until the next entry comes due, without being woken", async () => {
    const p = await partner();
    await store1(p.id, quiet);
    const dueAt = new Date(Date.now() + 1_500);
    await quiet.queue.updateMany({ partnerId: p.id }, { $set: { dueAt } });
    // Far longer than the test may take: only the entry's due time can wake it.
    const { d, stop } = dispatcher({ store: quiet, idleMs: 600_000 });
    d.start();
    try {
      const [arrival] = await p.receiver.waitFor((a) => a.length >= 1, 15_000, "the event due in 1.5 s");
      expect(arrival!.at).toBeGreaterThanOrEqual(dueAt.getTime());
    } finally {
      await stop();
    }
  });

  it("a poke (new work stored by this replica) wakes it at once", async () => {
    const p = await partner();
    const { d, stop } = dispatcher({ store: quiet, idleMs: 600_000 });
    d.start();
    try {
      // Delivered, then the queue is empty: the dispatcher sleeps for its idleMs.
      await store1(p.id, quiet);
      d.poke();
      await p.receiver.waitFor((a) => a.length >= 1, 15_000, "the first event");
      await store1(p.id, quiet);
      d.poke();
      await p.receiver.waitFor((a) => a.length >= 2, 15_000, "the event stored after a poke");
    } finally {
      await stop();
    }
  });

  it("sees an entry another replica stored (no poke here) within its idle sleep", async () => {
    const p = await partner();
    const { d, stop } = dispatcher({ store: quiet, idleMs: 1_000 });
    d.start();
    try {
      await store1(p.id, quiet);
      await p.receiver.waitFor((a) => a.length >= 1, 15_000, "the first event");
      await store1(p.id, quiet);
      await p.receiver.waitFor((a) => a.length >= 2, 15_000, "the event stored without a poke");
    } finally {
      await stop();
    }
  });
});
