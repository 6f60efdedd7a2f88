import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { webhookFailingEndpoints, webhookOldestPendingAge } from "@pi/common/runtime/metrics";
import { refreshWebhookGauges } from "../src/gauges.js";
import { openWebhookStore, type QueueDoc, type WebhookStore } from "../src/store.js";
import { testSettings } from "../../../test/support/services.js";

// The webhook gauges read from the database (docs/observability.md, "Metrics"), as every replica
// reads them at each scrape: the oldest delivery still queued, and the endpoints failing for the failing period.
let mongo: Mongo;
let store: WebhookStore;
const now = new Date("2026-11-26T12:00:00Z");
const ago = (seconds: number) => new Date(now.getTime() - seconds * 1000);
const gauge = async (g: { get(): Promise<{ values: { value: number }[] }> }) => (await g.get()).values[0]?.value;

beforeAll(async () => {
  const settings = testSettings();
  mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "webhook"));
  store = await openWebhookStore(mongo.db);
});

afterAll(async () => {
  await mongo.db.dropDatabase();
  await mongo.close();
});

describe("webhook gauges", () => {
  it("the oldest queued delivery's age: 0 when none, the oldest's when several, down once it leaves the queue", async () => {
    await refreshWebhookGauges(store, 3600_000, now);
    expect(await gauge(webhookOldestPendingAge)).toBe(0);
    const queued = (id: string, secondsAgo: number): QueueDoc => ({
      _id: id,
      partnerId: "ptr_1",
      dueAt: now,
      attempts: 1,
      body: "{}",
      createdAt: ago(secondsAgo),
    });
    await store.queue.insertMany([queued("evt_a", 30), queued("evt_b", 600), queued("evt_c", 5)]);
    await refreshWebhookGauges(store, 3600_000, now);
    expect(await gauge(webhookOldestPendingAge)).toBe(600);
    await store.queue.deleteOne({ _id: "evt_b" });
    await refreshWebhookGauges(store, 3600_000, now);
    expect(await gauge(webhookOldestPendingAge)).toBe(30);
  });

  it("failing endpoints: those failing for at least the failing period; not one failing for less, nor one that delivered", async () => {
    const endpoint = (id: string, failingSince: Date | null) => ({
      _id: id,
      failingSince,
      lastSuccessAt: null,
      lastFailureAt: failingSince,
      alertedAt: null,
    });
    await store.endpoints.insertMany([
      endpoint("ptr_a", ago(7200)),
      endpoint("ptr_b", ago(3600)),
      endpoint("ptr_c", ago(60)),
      endpoint("ptr_d", null),
    ]);
    await refreshWebhookGauges(store, 3600_000, now);
    expect(await gauge(webhookFailingEndpoints)).toBe(2);
    await store.endpoints.updateOne({ _id: "ptr_a" }, { $set: { failingSince: null } });
    await refreshWebhookGauges(store, 3600_000, now);
    expect(await gauge(webhookFailingEndpoints)).toBe(1);
  });
});
