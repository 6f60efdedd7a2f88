import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MongoClient, type Db } from "mongodb";
import { clientsFor, type FileIntakeClient } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { LocalKeyWrapper, type KeyWrapper } from "@pi/common/store/data-keys";
import { newId } from "@pi/common/rules/ids";
import { takeLease } from "@pi/common/background/lease";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { commonv1, fileintakev1 } from "@pi/proto";
import { startFileIntakeService } from "../src/service.js";
import { BLOB_SEGMENTS, openFileStore, segmentCount, segmentId, type FileDoc, type FileStore } from "../src/store.js";
import { extractionWorker } from "./extraction-worker.js";
import { readExtraction, readMeta } from "./read-blob.js";
import { RETENTION_LEASE, retentionRound, sweepRetention, type RetentionPolicy } from "../src/retention.js";
import { as, testSettings } from "../../../test/support/services.js";

// Retention of file data (docs/security.md, "Data at rest"): the sweep deletes bytes, extraction
// result and metadata of files past their mode's retention, keeps the record and its status, and
// runs on one replica at a time. The clock the sweep judges by is injected: no test waits for days.

type Request = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
const ELDER = "apple.banana.cherry@elders.example";
const DAY = 86_400_000;
const policy: RetentionPolicy = { live: 30 * DAY, test: DAY };
const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));

let settings: Settings;
let service: RunningService;
let client: FileIntakeClient;
let mongo: MongoClient;
let db: Db;
let store: FileStore;
let dataKeys: KeyWrapper;
let worker: ReturnType<typeof extractionWorker>;

beforeAll(async () => {
  settings = testSettings();
  dataKeys = LocalKeyWrapper.fromSetting(settings.DATA_KEYS!);
  // Passive: no consumer and no sweeps; the test runs the worker and the sweep itself.
  service = await startFileIntakeService(settings, createLogger("file-intake", settings.LOG_LEVEL), {
    connections: async () => true,
    passive: true,
  });
  client = clientsFor({
    ...as(settings, "gateway"),
    FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${service.port}`,
  }).fileIntake();
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  db = mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake"));
  store = await openFileStore(db);
  worker = extractionWorker(settings, service.port);
});

afterAll(async () => {
  await service?.stop();
  await db?.dropDatabase();
  await mongo?.close();
});

async function* upload(
  partnerId: string,
  bytes: Uint8Array,
  mode: commonv1.Mode,
  purpose?: string,
): AsyncGenerator<Request> {
  yield { part: { case: "header", value: { partnerId, mode } } };
  yield { part: { case: "chunk", value: bytes } };
  yield { part: { case: "trailer", value: { elderAddress: ELDER, purpose } } };
}

async function send(partnerId: string, mode: commonv1.Mode, process = true): Promise<FileDoc> {
  const res = await client.submitFile(upload(partnerId, fixture("sample.txt"), mode, "care_note"));
  if (process) expect(await worker.process(res.file!.id)).toBe("processed");
  return (await store.files.findOne({ _id: res.file!.id }))!;
}

/** The file's stored segments, each looked up by its _id (and one past the last, which must not exist). */
const chunksOf = async (file: FileDoc) => {
  let found = 0;
  for (let n = 0; n <= segmentCount(file.size); n++)
    found += await db.collection(BLOB_SEGMENTS).countDocuments({ _id: segmentId(file.blobId, n) as never });
  return found;
};
const statusOf = async (file: FileDoc) =>
  (
    await client.getFile({
      partnerId: file.partnerId,
      id: file._id,
      mode: file.mode === "live" ? commonv1.Mode.LIVE : commonv1.Mode.TEST,
    })
  ).file?.status;

async function expectSwept(file: FileDoc) {
  expect(await chunksOf(file)).toBe(0);
  expect(await store.extractions.countDocuments({ _id: file._id })).toBe(0);
  const doc = await store.files.findOne({ _id: file._id });
  expect(doc).toMatchObject({ dataKey: null, sealedMeta: null, purgedAt: expect.any(Date), status: "processed" });
  for (const field of ["elder", "purpose", "sha256"]) expect(doc).not.toHaveProperty(field);
  expect(await readMeta(store, dataKeys, file._id)).toBeNull();
}

async function expectKept(file: FileDoc) {
  expect(await chunksOf(file)).toBeGreaterThan(0);
  expect(await store.files.findOne({ _id: file._id })).toMatchObject({ dataKey: { kid: "k1" }, purgedAt: null });
  expect(await readMeta(store, dataKeys, file._id)).toMatchObject({ purpose: "care_note" });
}

describe("the retention sweep", () => {
  it("deletes a test file's data after TEST_FILE_RETENTION_SECONDS and a live file's (bytes, extraction result, metadata) after FILE_RETENTION_SECONDS; GET /v1/files/{id} still answers the status", async () => {
    const partnerId = newId("ptr");
    const live = await send(partnerId, commonv1.Mode.LIVE);
    const test = await send(partnerId, commonv1.Mode.TEST);
    expect(await readExtraction(store, dataKeys, live._id)).toMatchObject({ ok: true, kind: "plain-text" });
    const t0 = live.createdAt.getTime();

    // Nothing is due before the shorter retention.
    await sweepRetention(store, policy, new Date(t0 + DAY - 60_000));
    await expectKept(live);
    await expectKept(test);

    // Past the test files' retention, within the live files'.
    await sweepRetention(store, policy, new Date(t0 + 2 * DAY));
    await expectSwept(test);
    await expectKept(live);
    expect(await readExtraction(store, dataKeys, live._id)).toMatchObject({ ok: true });

    // Past the live files' retention.
    await sweepRetention(store, policy, new Date(t0 + 31 * DAY));
    await expectSwept(live);
    await expect(readExtraction(store, dataKeys, live._id)).resolves.toBeNull();

    // The file's id and status outlive its data: the partner's GET answers as before.
    expect(await statusOf(live)).toBe(fileintakev1.FileStatus.PROCESSED);
    expect(await statusOf(test)).toBe(fileintakev1.FileStatus.PROCESSED);
  });

  it("leaves a file still received (extraction pending) until it has left that state", async () => {
    const pending = await send(newId("ptr"), commonv1.Mode.LIVE, false);
    const later = new Date(pending.createdAt.getTime() + 60 * DAY);
    await sweepRetention(store, policy, later);
    await expectKept(pending);
    expect(await worker.process(pending._id)).toBe("processed");
    await sweepRetention(store, policy, later);
    await expectSwept(pending);
  });

  it("one round sweeps every file due, batch after batch", async () => {
    const partnerId = newId("ptr");
    const files = [];
    for (let i = 0; i < 5; i++) files.push(await send(partnerId, commonv1.Mode.TEST));
    expect(
      await sweepRetention(store, policy, new Date(files[4]!.createdAt.getTime() + 2 * DAY), async () => true, 2),
    ).toBeGreaterThanOrEqual(5);
    for (const file of files) await expectSwept(file);
  });

  it("a sweep that died midway (data key gone, bytes still there) is finished by the next one", async () => {
    const file = await send(newId("ptr"), commonv1.Mode.LIVE);
    await store.files.updateOne({ _id: file._id }, { $set: { dataKey: null, sealedMeta: null } });
    await sweepRetention(store, policy, new Date(file.createdAt.getTime() + 31 * DAY));
    await expectSwept(file);
  });

  it("runs on one replica at a time: while another holds the sweep's lease, a round does nothing", async () => {
    const file = await send(newId("ptr"), commonv1.Mode.TEST);
    const clock = () => new Date(file.createdAt.getTime() + 2 * DAY);
    const logger = createLogger("retention", "silent");
    await retentionRound(store, policy, 60_000, logger, () => new Date(0)); // creates the lease document
    const other = await takeLease(
      store.leases,
      { _id: RETENTION_LEASE },
      { until: "until", holder: "holder" },
      { ms: 60_000 },
    );
    expect(other).not.toBeNull();
    expect(await retentionRound(store, policy, 60_000, logger, clock)).toBeUndefined();
    await expectKept(file);
    // Once that lease has run out (its holder died), the next round runs.
    await store.leases.updateOne({ _id: RETENTION_LEASE }, { $set: { until: new Date(Date.now() - 1) } });
    expect(await retentionRound(store, policy, 60_000, logger, clock)).toBeGreaterThanOrEqual(1);
    await expectSwept({ ...file, status: "processed" });
    // And it gave the lease back.
    expect(await store.leases.findOne({ _id: RETENTION_LEASE })).toMatchObject({ until: null, holder: null });
  });
});
