import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { RpcError, Status } from "@pi/common/rpc/errors";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MongoClient, type ObjectId, type Db } from "mongodb";
import { clientsFor, type FileIntakeClient } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { ErrorReason, reasonOf } from "@pi/common/rpc/errors";
import { LocalKeyWrapper, SEAL_OVERHEAD, type KeyWrapper } from "@pi/common/store/data-keys";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { commonv1, fileintakev1 } from "@pi/proto";
import { Extractor } from "@pi/extraction";
import { extractionWorker, samplePngDimensions } from "./extraction-worker.js";
import { startFileIntakeService, type FileIntakeOptions } from "../src/service.js";
import { as, testSettings } from "../../../test/support/services.js";
import type { ConnectionCheck } from "../src/intake.js";
import {
  BLOB_SEGMENT_BYTES,
  BLOB_SEGMENTS,
  keyId,
  segmentCount,
  segmentId,
  type FileDoc,
  type KeyDoc,
} from "../src/store.js";
import { SEGMENT_INSERTS_IN_FLIGHT } from "../src/staging.js";
import { readBlob, readExtraction, readMeta } from "./read-blob.js";

// file-intake on its own, on the real MongoDB-wire server and Kafka, driven through its Connect API the way the
// gateway drives it. The connection service is replaced by a switch (the only stub: it is not
// storage); end-to-end tests under test/e2e use the real one.

type Request = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
const ELDER = "apple.banana.cherry@elders.example";

let settings: Settings;
let mongo: MongoClient;
let db: Db;
let service: RunningService;
let client: FileIntakeClient;
let dataKeys: KeyWrapper;
const active = new Set<string>();
const connections: ConnectionCheck = async (partnerId, mode, address) => active.has(`${partnerId}|${mode}|${address}`);

async function start(extra: FileIntakeOptions = {}, on = settings) {
  const s = await startFileIntakeService(on, createLogger("file-intake", on.LOG_LEVEL), { connections, ...extra });
  return {
    service: s,
    client: clientsFor({ ...as(on, "gateway"), FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${s.port}` }).fileIntake(),
  };
}

/** A file-intake in a namespace of its own with no worker, consumer or sweep: the test drives them. */
async function withPassiveIntake(
  use: (intake: { client: FileIntakeClient; db: Db; settings: Settings; port: number }) => Promise<void>,
) {
  const own = testSettings({ DATA_KEYS: settings.DATA_KEYS! });
  const intake = await start({ passive: true }, own);
  try {
    await use({
      client: intake.client,
      db: mongo.db(databaseName(own.DATA_NAMESPACE, "file-intake")),
      settings: own,
      port: intake.service.port,
    });
  } finally {
    await intake.service.stop();
  }
}

beforeAll(async () => {
  settings = testSettings({ IDEMPOTENCY_TTL_SECONDS: "3600" });
  dataKeys = LocalKeyWrapper.fromSetting(settings.DATA_KEYS!);
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  db = mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake"));
  ({ service, client } = await start({ relayEveryMs: 300 }));
});

afterAll(async () => {
  await service?.stop();
  await mongo?.close();
});

function partner() {
  const partnerId = newId("ptr");
  active.add(`${partnerId}|live|${ELDER}`);
  return partnerId;
}

async function* stream(
  partnerId: string,
  chunks: Uint8Array[],
  opts: { key?: string; elder?: string; purpose?: string; mode?: commonv1.Mode; trailer?: boolean } = {},
): AsyncGenerator<Request> {
  yield {
    part: { case: "header", value: { partnerId, mode: opts.mode ?? commonv1.Mode.LIVE, idempotencyKey: opts.key } },
  };
  for (const chunk of chunks) yield { part: { case: "chunk", value: chunk } };
  if (opts.trailer !== false)
    yield { part: { case: "trailer", value: { elderAddress: opts.elder ?? ELDER, purpose: opts.purpose } } };
}

function chunked(bytes: Uint8Array, size = 64 * 1024): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size));
  return out;
}

async function refusal(p: Promise<unknown>) {
  try {
    await p;
  } catch (err) {
    return reasonOf(err)?.reason ?? RpcError.from(err).code;
  }
  throw new Error("expected a refusal");
}

async function storage() {
  return {
    files: await db.collection("files").countDocuments(),
    segments: await db.collection(BLOB_SEGMENTS).countDocuments(),
    openUploads: await db.collection("uploads").countDocuments({ discardedAt: null }),
  };
}

/** Waits until what is stored settles back to `expected` (a refusal discards after it answers). */
async function expectStorage(expected: Awaited<ReturnType<typeof storage>>) {
  const deadline = Date.now() + 5000;
  for (;;) {
    const now = await storage();
    if (JSON.stringify(now) === JSON.stringify(expected) || Date.now() > deadline) return expect(now).toEqual(expected);
    await sleep(50);
  }
}

describe("a submission is stored only when every check passed", () => {
  it("the record and the bytes (with their SHA-256) are written before the answer, encrypted under the file's own data key", async () => {
    const partnerId = partner();
    const bytes = fixture("sample.pdf");
    const res = await client.submitFile(stream(partnerId, [bytes], { purpose: "discharge_summary" }));
    expect(res.file?.status).toBe(fileintakev1.FileStatus.RECEIVED);
    const doc = await db.collection<FileDoc>("files").findOne({ _id: res.file!.id });
    expect(doc).toMatchObject({
      partnerId,
      mode: "live",
      mediaType: "application/pdf",
      size: bytes.length,
      dataKey: { kid: "k1" },
      purgedAt: null,
    });
    // Elder, purpose and SHA-256 only sealed; the plaintext SHA-256 of the plaintext bytes inside.
    expect(doc).not.toHaveProperty("elder");
    expect(doc).not.toHaveProperty("purpose");
    expect(doc).not.toHaveProperty("sha256");
    expect(JSON.stringify(doc)).not.toMatch(/discharge_summary|apple\.banana/);
    const store = await (await import("../src/store.js")).openFileStore(db);
    expect(await readMeta(store, dataKeys, doc!._id)).toEqual({
      elder: ELDER,
      purpose: "discharge_summary",
      sha256: createHash("sha256").update(bytes).digest("hex"),
    });
    // Segments hold ciphertext only (each found by its own _id); opened with the data key they give the very bytes.
    const segments = [];
    for (let n = 0; n < segmentCount(bytes.length); n++)
      segments.push(await db.collection(BLOB_SEGMENTS).findOne({ _id: segmentId(doc!.blobId, n) as never }));
    expect(segments.every((s) => s !== null)).toBe(true);
    expect(
      await db.collection(BLOB_SEGMENTS).countDocuments({ _id: segmentId(doc!.blobId, segments.length) as never }),
    ).toBe(0);
    const raw = Buffer.concat(segments.map((s) => s!.data.buffer as Buffer));
    expect(raw.length).toBe(bytes.length + segments.length * SEAL_OVERHEAD);
    expect(raw.includes(bytes.subarray(0, 64))).toBe(false);
    expect(raw.includes(Buffer.from("Discharge"))).toBe(false);
    expect((await readBlob(store, doc!, await dataKeys.unwrap(doc!.dataKey!))).equals(bytes)).toBe(true);
    expect(await db.collection("uploads").countDocuments({ _id: doc!.blobId })).toBe(0);
  });

  it("each file has its own data key, and a file's sealed data cannot be opened with another's", async () => {
    const partnerId = partner();
    const [a, b] = [
      await client.submitFile(stream(partnerId, [fixture("sample.txt")])),
      await client.submitFile(stream(partnerId, [fixture("sample.txt")])),
    ];
    const [da, db2] = [
      await db.collection<FileDoc>("files").findOne({ _id: a.file!.id }),
      await db.collection<FileDoc>("files").findOne({ _id: b.file!.id }),
    ];
    const [ka, kb] = [await dataKeys.unwrap(da!.dataKey!), await dataKeys.unwrap(db2!.dataKey!)];
    expect(ka.equals(kb)).toBe(false);
    const store = await (await import("../src/store.js")).openFileStore(db);
    await expect(readBlob(store, da!, kb)).rejects.toThrow();
  });

  it("an unaccepted type is refused from its first bytes, before anything is staged", async () => {
    const partnerId = partner();
    const before = await storage();
    const uploadsBefore = await db.collection("uploads").countDocuments();
    expect(await refusal(client.submitFile(stream(partnerId, [fixture("unsupported.zip")])))).toBe(
      ErrorReason.UNSUPPORTED_MEDIA_TYPE,
    );
    await expectStorage(before);
    expect(await db.collection("uploads").countDocuments()).toBe(uploadsBefore);
  });

  it("an upload of more segments than it has buffers gives back its very bytes: a part segment at the end, or an empty one", async () => {
    const partnerId = partner();
    const store = await (await import("../src/store.js")).openFileStore(db);
    // Letters at random, so a segment sealed from a reused buffer too early, or stored out of place, shows.
    const text = (size: number) => randomBytes(size).map((b) => 97 + (b % 26));
    // In chunks that straddle segments, and in one message: its segments are sealed back to back.
    for (const [bytes, chunk] of [
      [text(5 * BLOB_SEGMENT_BYTES + 12_345), 300_001],
      [text(3 * BLOB_SEGMENT_BYTES), 300_001],
      [text(5 * BLOB_SEGMENT_BYTES + 12_345), Infinity],
    ] as const) {
      const res = await client.submitFile(stream(partnerId, chunked(bytes, chunk)));
      const doc = await db.collection<FileDoc>("files").findOne({ _id: res.file!.id });
      expect(segmentCount(bytes.length)).toBeGreaterThan(SEGMENT_INSERTS_IN_FLIGHT + 1);
      expect((await readBlob(store, doc!, await dataKeys.unwrap(doc!.dataKey!))).equals(bytes)).toBe(true);
    }
  });

  it("a file over MAX_FILE_BYTES, text that turns binary late, no connection and a cancelled stream leave no bytes", async () => {
    const partnerId = partner();
    const before = await storage();
    const big = Buffer.alloc(settings.MAX_FILE_BYTES + 1, "a");
    expect(await refusal(client.submitFile(stream(partnerId, chunked(big, 1024 * 1024)), { timeoutMs: 120_000 }))).toBe(
      ErrorReason.FILE_TOO_LARGE,
    );

    const lateBinary = Buffer.concat([Buffer.alloc(3 * 1024 * 1024, "b"), Buffer.from([0x00]), Buffer.from("tail")]);
    expect(await refusal(client.submitFile(stream(partnerId, chunked(lateBinary))))).toBe(
      ErrorReason.UNSUPPORTED_MEDIA_TYPE,
    );

    expect(
      await refusal(
        client.submitFile(stream(partnerId, [fixture("sample.txt")], { elder: "other.elder.here@elders.example" })),
      ),
    ).toBe(ErrorReason.NO_ACTIVE_CONNECTION);

    const abort = new AbortController();
    async function* cancelled(): AsyncGenerator<Request> {
      yield* stream(partnerId, chunked(Buffer.alloc(2 * 1024 * 1024, "c")), { trailer: false });
      // The partner gives up once its upload is being staged.
      for (
        const deadline = Date.now() + 10_000;
        (await db.collection("uploads").countDocuments({ discardedAt: null })) <= before.openUploads &&
        Date.now() < deadline;
      )
        await sleep(20);
      abort.abort();
    }
    expect(await refusal(client.submitFile(cancelled(), { signal: abort.signal }))).toBe(Status.CANCELLED);
    await expectStorage(before);
  });

  it("an empty file and a malformed elder are invalid requests", async () => {
    const partnerId = partner();
    expect(await refusal(client.submitFile(stream(partnerId, [])))).toBe(ErrorReason.INVALID_REQUEST);
    expect(
      await refusal(client.submitFile(stream(partnerId, [fixture("sample.txt")], { elder: "not an address" }))),
    ).toBe(ErrorReason.INVALID_REQUEST);
  });

  it("a stream without a header first is refused", async () => {
    async function* headless(): AsyncGenerator<Request> {
      yield { part: { case: "chunk", value: fixture("sample.txt") } };
    }
    expect(await refusal(client.submitFile(headless()))).toBe(Status.INVALID_ARGUMENT);
  });
});

describe("idempotency keys", () => {
  it("concurrent submissions with one key and one payload are one file", async () => {
    const partnerId = partner();
    const bytes = fixture("sample.png");
    const results = await Promise.all(
      Array.from({ length: 6 }, () => client.submitFile(stream(partnerId, [bytes], { key: "same-key" }))),
    );
    const ids = new Set(results.map((r) => r.file!.id));
    expect(ids.size).toBe(1);
    expect(await db.collection("files").countDocuments({ partnerId })).toBe(1);
    expect(await refusal(client.submitFile(stream(partnerId, [fixture("sample.jpg")], { key: "same-key" })))).toBe(
      ErrorReason.IDEMPOTENCY_KEY_REUSE,
    );
  });

  it("a claim whose owner died is taken over once its lease ends; one whose file was written is replayed", async () => {
    const partnerId = partner();
    const bytes = fixture("sample.txt");
    const old = new Date(Date.now() - 10 * 60_000);
    const keys = db.collection<KeyDoc>("idempotency_keys");
    // A request that died after claiming, before writing its file: the key is free again.
    await keys.insertOne({
      _id: keyId(partnerId, "live", "died-early"),
      partnerId,
      mode: "live",
      key: "died-early",
      fingerprint: "whatever",
      fileId: newId("file"),
      state: "claimed",
      claimedUntil: old,
      expiresAt: new Date(Date.now() + 3_600_000),
    });
    const taken = await client.submitFile(stream(partnerId, [bytes], { key: "died-early" }));
    expect(await keys.findOne({ partnerId, key: "died-early" })).toMatchObject({
      fileId: taken.file!.id,
      state: "committed",
    });

    // A request that died after writing its file, before committing the key: a retry gets that file.
    const first = await client.submitFile(stream(partnerId, [bytes], { key: "died-late" }));
    await keys.updateOne({ partnerId, key: "died-late" }, { $set: { state: "claimed", claimedUntil: old } });
    const retry = await client.submitFile(stream(partnerId, [bytes], { key: "died-late" }));
    expect(retry.file!.id).toBe(first.file!.id);
  });

  it("a refused request does not use up its key", async () => {
    const partnerId = newId("ptr");
    const bytes = fixture("sample.txt");
    expect(await refusal(client.submitFile(stream(partnerId, [bytes], { key: "k1" })))).toBe(
      ErrorReason.NO_ACTIVE_CONNECTION,
    );
    expect(await db.collection("idempotency_keys").countDocuments({ partnerId })).toBe(0);
    active.add(`${partnerId}|live|${ELDER}`);
    const ok = await client.submitFile(stream(partnerId, [bytes], { key: "k1" }));
    expect(ok.file!.id).toMatch(/^file_/);
  });

  it("the sweep deletes expired keys and only those; an expired key not yet swept is already free", async () => {
    const partnerId = partner();
    const keys = db.collection<KeyDoc>("idempotency_keys");
    const bytes = fixture("sample.txt");
    const first = await client.submitFile(stream(partnerId, [bytes], { key: "old" }));
    await keys.updateOne({ partnerId, key: "old" }, { $set: { expiresAt: new Date(Date.now() - 1000) } });
    const again = await client.submitFile(stream(partnerId, [fixture("sample.jpg")], { key: "old" }));
    expect(again.file!.id).not.toBe(first.file!.id);

    await client.submitFile(stream(partnerId, [bytes], { key: "kept" }));
    await keys.updateOne({ partnerId, key: "old" }, { $set: { expiresAt: new Date(Date.now() - 1000) } });
    const { IdempotencyKeys } = await import("../src/keys.js");
    const { openFileStore } = await import("../src/store.js");
    const swept = await new IdempotencyKeys(
      await openFileStore(db),
      1000,
      createLogger("file-intake", "silent"),
    ).sweep();
    expect(swept).toBeGreaterThanOrEqual(1);
    expect(
      await keys
        .find({ partnerId })
        .map((k) => k.key)
        .toArray(),
    ).toEqual(["kept"]);
  });
});

describe("GetFile", () => {
  it("answers the owner in the file's mode and the same NOT_FOUND to everyone else", async () => {
    const partnerId = partner();
    const res = await client.submitFile(stream(partnerId, [fixture("sample.txt")]));
    const id = res.file!.id;
    expect((await client.getFile({ partnerId, id, mode: commonv1.Mode.LIVE })).file?.id).toBe(id);
    for (const req of [
      { partnerId: newId("ptr"), id, mode: commonv1.Mode.LIVE },
      { partnerId, id, mode: commonv1.Mode.TEST },
      { partnerId, id: newId("file"), mode: commonv1.Mode.LIVE },
      { partnerId, id: "file_x", mode: commonv1.Mode.LIVE },
    ]) {
      expect(await refusal(client.getFile(req))).toBe(ErrorReason.NOT_FOUND);
    }
  });
});

describe("nothing accepted is left unprocessed", () => {
  it("a record whose event was never published (the process died after the 202) is published by the relay and processed, its result sealed", async () => {
    const partnerId = partner();
    const { openFileStore, newFileDoc } = await import("../src/store.js");
    const { StagedUpload } = await import("../src/staging.js");
    const { sealMeta } = await import("../src/at-rest.js");
    const store = await openFileStore(db);
    // What an upload stores before its 202 (intake.ts), without the publish that follows it.
    const dataKey = randomBytes(32);
    const bytes = fixture("sample.png");
    const staged = new StagedUpload(store, partnerId, dataKey);
    await staged.write(bytes);
    await staged.finish();
    await staged.committed();
    const now = new Date(Date.now() - 1000);
    const fileId = newId("file");
    // The record as intake builds it, its FileReceivedEvent still in the outbox.
    await store.files.insertOne(
      newFileDoc(
        {
          _id: fileId,
          partnerId,
          mode: "live",
          dataKey: await dataKeys.wrap(dataKey),
          sealedMeta: sealMeta(dataKey, fileId, {
            elder: ELDER,
            purpose: null,
            sha256: createHash("sha256").update(bytes).digest("hex"),
          }),
          mediaType: "image/png",
          size: bytes.length,
          blobId: staged.id,
          idempotencyKey: null,
        },
        now,
      ),
    );
    const deadline = Date.now() + 20_000;
    let doc = await store.files.findOne({ _id: fileId });
    while (doc?.outbox.length && Date.now() < deadline) {
      await sleep(100);
      doc = await store.files.findOne({ _id: fileId });
    }
    expect(doc).toMatchObject({ status: "received", outbox: [] });
    // What the extraction service does with the event (it reads the bytes through file-intake).
    const extractor = new Extractor();
    try {
      expect(
        await extractionWorker(settings, service.port, (type, bytes) => extractor.extract(type, bytes)).process(fileId),
      ).toBe("processed");
    } finally {
      await extractor.close();
    }
    doc = await store.files.findOne({ _id: fileId });
    expect(doc).toMatchObject({ status: "processed", outbox: [], dataKey: { kid: "k1" } });
    expect(await readExtraction(store, dataKeys, fileId)).toMatchObject({ ok: true, width: 64, height: 48 });
    const stored = await store.extractions.findOne({ _id: fileId });
    expect(stored).toMatchObject({ ok: true, kind: "image-dimensions" });
    expect(stored).not.toHaveProperty("width");
  });

  it("a worker that dies mid-file leaves it to be taken again after the lease, and processed", async () => {
    const { openFileStore } = await import("../src/store.js");
    await withPassiveIntake(async (intake) => {
      const store = await openFileStore(intake.db);
      const res = await intake.client.submitFile(stream(partner(), [fixture("sample.png")]));
      const id = res.file!.id;
      // The "crashed" worker: takes the file and never finishes, nor renews its lease.
      const timing = { leaseMs: 3000, heartbeatMs: 60_000, stuckAfterMs: 0, maxAttempts: 3 };
      // It hangs until the test is over, then gives up, so its lease heartbeat stops with the test
      // (a timer left behind fires into whichever test this jest worker runs next).
      let giveUp: ((err: Error) => void) | undefined;
      const hung = extractionWorker(
        intake.settings,
        intake.port,
        () => new Promise((_, reject) => (giveUp = reject)),
        timing,
      );
      const hungRun = hung.process(id).catch(() => undefined);
      try {
        let taken = await store.files.findOne({ _id: id });
        for (const deadline = Date.now() + 10_000; taken?.attempts !== 1 && Date.now() < deadline; ) {
          await sleep(20);
          taken = await store.files.findOne({ _id: id });
        }
        expect(taken).toMatchObject({ status: "received", attempts: 1 });

        const restarted = extractionWorker(intake.settings, intake.port, samplePngDimensions, timing);
        expect(await restarted.process(id)).toBe("skipped"); // the lease still holds
        expect(await restarted.sweepStuck()).toBe(0);
        await sleep(Math.max(0, taken!.leaseUntil!.getTime() - Date.now()) + 50);
        expect(await restarted.sweepStuck()).toBe(1);
        expect(await store.files.findOne({ _id: id })).toMatchObject({
          status: "processed",
          attempts: 2,
          leaseUntil: null,
        });
        expect(await readExtraction(store, dataKeys, id)).toMatchObject({
          ok: true,
          kind: "image-dimensions",
          width: 64,
          height: 48,
        });
      } finally {
        giveUp?.(new Error("the test is over"));
        await hungRun;
      }
    });
  });

  it("a file every take of which was interrupted fails instead of being retried for ever (reason extractor_died)", async () => {
    const { openFileStore } = await import("../src/store.js");
    await withPassiveIntake(async (intake) => {
      const store = await openFileStore(intake.db);
      const res = await intake.client.submitFile(stream(partner(), [fixture("sample.png")]));
      const id = res.file!.id;
      // Once the outbox is empty, nothing else writes the record while the test does.
      for (
        const deadline = Date.now() + 10_000;
        (await store.files.findOne({ _id: id }))?.outbox.length && Date.now() < deadline;
      )
        await sleep(20);
      await store.files.updateOne({ _id: id }, { $set: { attempts: 3 } });
      const worker = extractionWorker(intake.settings, intake.port, samplePngDimensions, {
        leaseMs: 1000,
        heartbeatMs: 500,
      });
      expect(await worker.process(id)).toBe("failed");
      expect(await store.files.findOne({ _id: id })).toMatchObject({
        status: "failed",
        failureReason: "extractor_died",
        attempts: 4,
      });
      expect(await readExtraction(store, dataKeys, id)).toMatchObject({
        ok: false,
        reason: "extractor_died",
        error: expect.stringMatching(/died on the file 3 times/),
      });
    });
  });

  it("a plain-text file is measured as it is received: its extraction is recorded without reading its bytes back", async () => {
    const { openFileStore } = await import("../src/store.js");
    await withPassiveIntake(async (intake) => {
      const store = await openFileStore(intake.db);
      // A byte order mark (not counted), characters of two, three and four bytes (one a surrogate pair), cut mid-character.
      const bytes = Buffer.from(`\uFEFF${"care note: é € 😀\n".repeat(5000)}`);
      const res = await intake.client.submitFile(stream(partner(), chunked(bytes, 4099)));
      const id = res.file!.id;
      const textLength = new TextDecoder().decode(bytes).length;
      expect(await store.files.findOne({ _id: id })).toMatchObject({
        status: "received",
        mediaType: "text/plain",
        textLength,
      });
      let extracted = 0;
      const worker = extractionWorker(intake.settings, intake.port, async () => {
        extracted++;
        throw new Error("a text file is never extracted");
      });
      expect(await worker.process(id)).toBe("processed");
      expect(extracted).toBe(0);
      expect(await readExtraction(store, dataKeys, id)).toMatchObject({ ok: true, kind: "plain-text", textLength });
      expect(await store.files.findOne({ _id: id })).toMatchObject({
        status: "processed",
        attempts: 1,
        leaseToken: null,
      });
    });
  });

  it("the staging sweep deletes bytes of uploads that were abandoned, never a file's", async () => {
    const { openFileStore } = await import("../src/store.js");
    const { sweepStaging, StagedUpload } = await import("../src/staging.js");
    const store = await openFileStore(db);
    const orphan = new StagedUpload(store, "ptr_dead", randomBytes(32));
    await orphan.write(Buffer.alloc(3 * 1024 * 1024 + 10, 1)); // three segments stored, the rest buffered: the process "dies"
    const segmentsOf = (id: ObjectId) =>
      Promise.all(
        [0, 1, 2, 3].map((n) => db.collection(BLOB_SEGMENTS).countDocuments({ _id: segmentId(id, n) as never })),
      ).then((c) => c.reduce((a, b) => a + b));
    for (const deadline = Date.now() + 10_000; (await segmentsOf(orphan.id)) < 3 && Date.now() < deadline; )
      await sleep(20);
    expect(await segmentsOf(orphan.id)).toBe(3);
    const kept = await client.submitFile(stream(partner(), [fixture("sample.txt")]));
    const keptDoc = await store.files.findOne({ _id: kept.file!.id });
    // As if the committing process had died before removing its upload document.
    await store.uploads.replaceOne(
      { _id: keptDoc!.blobId },
      { partnerId: keptDoc!.partnerId, startedAt: new Date(0), discardedAt: null },
      { upsert: true },
    );

    await sweepStaging(store, new Date(Date.now() + 2 * 3_600_000));
    expect(await segmentsOf(orphan.id)).toBe(0);
    expect(await store.uploads.countDocuments({ _id: { $in: [orphan.id, keptDoc!.blobId] } })).toBe(0);
    expect(await segmentsOf(keptDoc!.blobId)).toBe(1);
  });
});
