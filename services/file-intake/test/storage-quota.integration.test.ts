import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { RpcError } from "@pi/common/rpc/errors";
import { MongoClient } from "mongodb";
import { clientsFor, type FileIntakeClient } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { ErrorReason, reasonOf } from "@pi/common/rpc/errors";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { commonv1, type fileintakev1 } from "@pi/proto";
import { startFileIntakeService } from "../src/service.js";
import { BLOB_SEGMENTS, openFileStore, type FileStore } from "../src/store.js";
import { extractionWorker } from "./extraction-worker.js";
import { sweepRetention, type RetentionPolicy } from "../src/retention.js";
import { usageKey } from "../src/quota.js";
import { as, testSettings } from "../../../test/support/services.js";

// The storage quota (docs/files.md, "Storage quota"), against the real database server: two
// started replicas of file-intake on one database share each partner's counter, uploads racing
// for the last room cannot both pass, an upload that crosses the quota mid-stream leaves nothing,
// and the retention sweep gives the room back and repairs what a crash left.

type Request = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
const ELDER = "apple.banana.cherry@elders.example";
const KiB = 1024;
const MiB = 1024 * KiB;
const DAY = 86_400_000;
const policy: RetentionPolicy = { live: 30 * DAY, test: DAY };
const LIVE_QUOTA = 10 * MiB;
const TEST_QUOTA = MiB;

let settings: Settings;
const replicas: RunningService[] = [];
let clients: FileIntakeClient[];
let mongo: MongoClient;
let store: FileStore;
let worker: ReturnType<typeof extractionWorker>;

beforeAll(async () => {
  settings = testSettings({
    FILE_STORAGE_QUOTA_BYTES: String(LIVE_QUOTA),
    TEST_FILE_STORAGE_QUOTA_BYTES: String(TEST_QUOTA),
  });
  for (let i = 0; i < 2; i++) {
    // Passive: no consumer and no sweeps; the test runs the worker and the sweep itself.
    replicas.push(
      await startFileIntakeService(settings, createLogger(`file-intake-${i}`, settings.LOG_LEVEL), {
        connections: async () => true,
        passive: true,
      }),
    );
  }
  clients = replicas.map((r) =>
    clientsFor({ ...as(settings, "gateway"), FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${r.port}` }).fileIntake(),
  );
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  store = await openFileStore(mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake")));
  worker = extractionWorker(settings, replicas[0]!.port);
});

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.stop()));
  await store?.db.dropDatabase();
  await mongo?.close();
});

const modeEnum = { live: commonv1.Mode.LIVE, test: commonv1.Mode.TEST } as const;

/** A text file of `size` bytes in chunks of `chunk`; `declared` is the length the gateway would pass on. */
async function* upload(
  partnerId: string,
  mode: "live" | "test",
  size: number,
  opts: { declared?: number; chunk?: number } = {},
): AsyncGenerator<Request> {
  const declaredBytes = opts.declared === undefined ? undefined : BigInt(opts.declared);
  yield { part: { case: "header", value: { partnerId, mode: modeEnum[mode], declaredBytes } } };
  const chunk = opts.chunk ?? 256 * KiB;
  for (let sent = 0; sent < size; sent += chunk)
    yield { part: { case: "chunk", value: Buffer.alloc(Math.min(chunk, size - sent), "a") } };
  yield { part: { case: "trailer", value: { elderAddress: ELDER } } };
}

/** The file's id, or the reason it was refused. */
const outcome = (client: FileIntakeClient, request: AsyncIterable<Request>) =>
  client.submitFile(request).then(
    (res) => res.file!.id,
    (err: unknown) =>
      reasonOf(err)?.reason === ErrorReason.STORAGE_QUOTA_EXCEEDED ? "quota" : RpcError.from(err).message,
  );

const usageOf = (partnerId: string, mode: "live" | "test") => store.usage.findOne({ _id: usageKey(partnerId, mode) });
const openUploads = () => store.uploads.countDocuments({ discardedAt: null });
const segments = () => store.db.collection(BLOB_SEGMENTS).countDocuments();

/** Once nothing is in flight: no open upload, and no segment but those of files. */
async function expectNothingStaged() {
  const files = await store.files.find({}, { projection: { size: 1 } }).toArray();
  const fileSegments = files.reduce((n, f) => n + Math.floor(f.size / MiB) + 1, 0);
  expect(await openUploads()).toBe(0);
  expect(await segments()).toBe(fileSegments);
}

describe("a partner's storage quota, shared by every replica", () => {
  it("two replicas cannot together exceed it: of eight uploads racing for the room of one, exactly one is accepted", async () => {
    const partnerId = newId("ptr");
    const size = 600 * KiB;
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        outcome(clients[i % 2]!, upload(partnerId, "test", size, { declared: size + 200 })),
      ),
    );
    expect(results.filter((r) => r.startsWith("file_"))).toHaveLength(1);
    expect(results.filter((r) => r === "quota")).toHaveLength(7);
    expect(await usageOf(partnerId, "test")).toMatchObject({ stored: size, used: size, holds: [] });
    // The other mode has its own room.
    expect(await outcome(clients[1]!, upload(partnerId, "live", size, { declared: size }))).toMatch(/^file_/);
    await expectNothingStaged();
  });

  it("an upload whose bytes cross it mid-stream is refused, its staged bytes discarded and its hold released", async () => {
    const partnerId = newId("ptr");
    // Of unknown length (a chunked body): it reserves step by step as its bytes arrive.
    const crossed = await outcome(clients[0]!, upload(partnerId, "live", LIVE_QUOTA + MiB, { chunk: MiB }));
    expect(crossed).toBe("quota");
    // Declared short of what it sends: the same.
    expect(await outcome(clients[1]!, upload(partnerId, "live", LIVE_QUOTA + MiB, { declared: MiB, chunk: MiB }))).toBe(
      "quota",
    );
    expect(await usageOf(partnerId, "live")).toMatchObject({ stored: 0, used: 0, holds: [] });
    await expectNothingStaged();
    // The whole quota in one file fits.
    expect(await outcome(clients[1]!, upload(partnerId, "live", LIVE_QUOTA, { chunk: MiB }))).toMatch(/^file_/);
    expect(await usageOf(partnerId, "live")).toMatchObject({ stored: LIVE_QUOTA, used: LIVE_QUOTA, holds: [] });
  });

  it("CheckStorageQuota answers before any byte: fits, or not with the Retry-After of what is in the way", async () => {
    const partnerId = newId("ptr");
    const ask = (declared?: number) =>
      clients[0]!.checkStorageQuota({
        partnerId,
        mode: commonv1.Mode.TEST,
        declaredBytes: declared === undefined ? undefined : BigInt(declared),
      });
    expect(await ask(TEST_QUOTA)).toMatchObject({ fits: true });
    expect(await ask(TEST_QUOTA + 1)).toMatchObject({ fits: false, retryAfterSeconds: 600 });
    expect(await outcome(clients[0]!, upload(partnerId, "test", 512 * KiB, { declared: 512 * KiB }))).toMatch(/^file_/);
    expect(await ask(512 * KiB)).toMatchObject({ fits: true });
    // Of unknown length, an upload needs room for a byte to start.
    expect(await ask()).toMatchObject({ fits: true });
    expect(await outcome(clients[1]!, upload(partnerId, "test", 512 * KiB))).toMatch(/^file_/);
    expect(await ask()).toMatchObject({ fits: false, retryAfterSeconds: 600 });
  });

  it("goes down when the retention sweep deletes a file's bytes, and that room can be used again", async () => {
    const partnerId = newId("ptr");
    const id = await outcome(clients[0]!, upload(partnerId, "test", 900 * KiB, { declared: 900 * KiB }));
    expect(id).toMatch(/^file_/);
    expect(await worker.process(id)).toBe("processed");
    expect(await outcome(clients[1]!, upload(partnerId, "test", 200 * KiB, { declared: 200 * KiB }))).toBe("quota");
    const file = (await store.files.findOne({ _id: id }))!;
    await sweepRetention(store, policy, new Date(file.createdAt.getTime() + 2 * DAY));
    expect(await usageOf(partnerId, "test")).toMatchObject({ stored: 0, used: 0, holds: [] });
    expect(await outcome(clients[1]!, upload(partnerId, "test", 900 * KiB, { declared: 900 * KiB }))).toMatch(/^file_/);
  });

  it("the sweep's repair drops the hold of an upload whose process died and sets a drifted counter from the files", async () => {
    const partnerId = newId("ptr");
    const id = await outcome(clients[0]!, upload(partnerId, "live", 300 * KiB, { declared: 300 * KiB }));
    const now = new Date();
    // A replica that died mid-upload an hour ago left its hold; another died between a file's insert and its settle.
    await store.usage.updateOne(
      { _id: usageKey(partnerId, "live") },
      {
        $set: {
          stored: 0,
          used: 5 * MiB + 7,
          holds: [
            { id: "dead", bytes: 5 * MiB, at: new Date(now.getTime() - 2 * 3_600_000) },
            { id: "alive", bytes: 7, at: now },
          ],
        },
      },
    );
    expect(
      await clients[0]!.checkStorageQuota({ partnerId, mode: commonv1.Mode.LIVE, declaredBytes: BigInt(6 * MiB) }),
    ).toMatchObject({ fits: false });
    expect(id).toMatch(/^file_/);
    await sweepRetention(store, policy, now);
    expect(await usageOf(partnerId, "live")).toMatchObject({
      stored: 300 * KiB,
      used: 300 * KiB + 7,
      holds: [{ id: "alive", bytes: 7 }],
    });
    // A partner with files but no counter (stored before the quota existed) gets one.
    const older = newId("ptr");
    await store.files.insertOne({ ...(await store.files.findOne({ _id: id }))!, _id: newId("file"), partnerId: older });
    await sweepRetention(store, policy, now);
    expect(await usageOf(older, "live")).toMatchObject({ stored: 300 * KiB, used: 300 * KiB, holds: [] });
  });
});
