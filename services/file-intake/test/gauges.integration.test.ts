import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { extractionBacklog, storagePartnersOverQuotaRatio, storageQuotaMaxUsedRatio } from "@pi/common/runtime/metrics";
import { refreshFileGauges } from "../src/gauges.js";
import { openFileStore, type FileStore } from "../src/store.js";
import { testSettings } from "../../../test/support/services.js";

// The file-intake gauges read from the database (issue 13: the backlog "visible in readiness or
// metrics"; issue 25: storage quota pressure), as every replica reads them at each scrape.
let mongo: Mongo;
let store: FileStore;
const limits = { live: 1000, test: 100 };

const value = async (
  gauge: { get(): Promise<{ values: { value: number; labels: Record<string, unknown> }[] }> },
  labels: Record<string, string> = {},
) => (await gauge.get()).values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value;

beforeAll(async () => {
  const settings = testSettings();
  mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "file-intake"));
  store = await openFileStore(mongo.db);
});

afterAll(async () => {
  await mongo.db.dropDatabase();
  await mongo.close();
});

describe("pi_extraction_backlog", () => {
  it("counts the files still received, at each refresh: up as files are accepted, down as they are processed or fail", async () => {
    await refreshFileGauges(store, limits);
    expect(await value(extractionBacklog)).toBe(0);
    const file = (id: string, status: string) =>
      ({ _id: id, status, createdAt: new Date() }) as unknown as Parameters<FileStore["files"]["insertOne"]>[0];
    await store.files.insertMany([
      file("file_a", "received"),
      file("file_b", "received"),
      file("file_c", "received"),
      file("file_d", "processed"),
    ]);
    await refreshFileGauges(store, limits);
    expect(await value(extractionBacklog)).toBe(3);
    await store.files.updateOne({ _id: "file_a" }, { $set: { status: "processed" } });
    await store.files.updateOne({ _id: "file_b" }, { $set: { status: "failed" } });
    await refreshFileGauges(store, limits);
    expect(await value(extractionBacklog)).toBe(1);
  });
});

describe("storage quota pressure", () => {
  it("reports the highest used / quota ratio per mode and how many partners reach 0.9 of a quota", async () => {
    const counter = (id: string, used: number) => ({ _id: id, stored: used, used, holds: [], version: 0 });
    await store.usage.insertMany([
      counter("ptn_a:live", 950),
      counter("ptn_a:test", 10),
      counter("ptn_b:live", 100),
      counter("ptn_b:test", 95),
      counter("ptn_c:live", 10),
    ]);
    await refreshFileGauges(store, limits);
    expect(await value(storageQuotaMaxUsedRatio, { mode: "live" })).toBeCloseTo(0.95);
    expect(await value(storageQuotaMaxUsedRatio, { mode: "test" })).toBeCloseTo(0.95);
    expect(await value(storagePartnersOverQuotaRatio, { threshold: "0.9" })).toBe(2);
    await store.usage.updateOne({ _id: "ptn_a:live" }, { $set: { used: 100 } });
    await refreshFileGauges(store, limits);
    expect(await value(storageQuotaMaxUsedRatio, { mode: "live" })).toBeCloseTo(0.1);
    expect(await value(storagePartnersOverQuotaRatio, { threshold: "0.9" })).toBe(1);
  });
});
