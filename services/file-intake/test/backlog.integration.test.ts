import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { metrics } from "@opentelemetry/api";
import { AggregationTemporality, MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { connectMongo, createLogger, databaseName, type Mongo } from "@pi/common";
import { observeBacklog } from "../src/backlog.js";
import { openFileStore, type FileStore } from "../src/store.js";
import { testSettings } from "../../../test/support/services.js";

// The accepted-but-unprocessed backlog as a metric (issue 13: "visible in readiness or metrics").
class CollectOnDemand extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected async onForceFlush() {}
  protected async onShutdown() {}
}

const reader = new CollectOnDemand();
let mongo: Mongo;
let store: FileStore;
let stop: () => void;

async function backlog(): Promise<number | undefined> {
  const { resourceMetrics } = await reader.collect();
  const metric = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === "files.received.backlog");
  return metric?.dataPoints[0]?.value as number | undefined;
}

beforeAll(async () => {
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  const settings = testSettings();
  mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "file-intake"));
  store = await openFileStore(mongo.db);
  stop = observeBacklog(store, createLogger("backlog-test", "silent"));
});

afterAll(async () => {
  stop();
  metrics.disable();
  await mongo.db.dropDatabase();
  await mongo.close();
});

describe("files.received.backlog", () => {
  it("counts the files still received, at each collection: up as files are accepted, down as they are processed or fail", async () => {
    expect(await backlog()).toBe(0);
    const file = (id: string, status: string) => ({ _id: id, status, createdAt: new Date() }) as unknown as Parameters<FileStore["files"]["insertOne"]>[0];
    await store.files.insertMany([file("file_a", "received"), file("file_b", "received"), file("file_c", "received"), file("file_d", "processed")]);
    expect(await backlog()).toBe(3);
    await store.files.updateOne({ _id: "file_a" }, { $set: { status: "processed" } });
    await store.files.updateOne({ _id: "file_b" }, { $set: { status: "failed" } });
    expect(await backlog()).toBe(1);
  });
});
