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
import { openFileStore, type FileStore } from "../src/store.js";
import { STORE_FULL_RETRY_AFTER_SECONDS } from "../src/quota.js";
import { bytesDeleted } from "../src/usage.js";
import { as, testSettings } from "../../../test/support/services.js";

// The store-wide high-water mark (docs/files.md, "Store-wide high-water mark") against the real
// database server: once all partners' files reach FILE_STORE_HIGH_WATER_BYTES, every new upload is
// refused with STORE_FULL (the gateway's 503 with Retry-After) before a byte is stored, whatever
// the partner's own quota leaves; room freed by the retention sweep admits uploads again.

type Request = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
const ELDER = "apple.banana.cherry@elders.example";
const MiB = 1024 * 1024;
const MARK = 3 * MiB;

let settings: Settings;
let service: RunningService;
let client: FileIntakeClient;
let mongo: MongoClient;
let store: FileStore;

beforeAll(async () => {
  settings = testSettings({
    FILE_STORE_HIGH_WATER_BYTES: String(MARK),
    FILE_STORAGE_QUOTA_BYTES: String(2 * MiB),
    TEST_FILE_STORAGE_QUOTA_BYTES: String(MiB),
  });
  service = await startFileIntakeService(settings, createLogger("file-intake", settings.LOG_LEVEL), {
    connections: async () => true,
    passive: true,
  });
  client = clientsFor({
    ...as(settings, "gateway"),
    FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${service.port}`,
  }).fileIntake();
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  store = await openFileStore(mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake")));
});

afterAll(async () => {
  await service?.stop();
  await store?.db.dropDatabase();
  await mongo?.close();
});

async function* upload(partnerId: string, size: number, declared?: number): AsyncGenerator<Request> {
  yield {
    part: {
      case: "header",
      value: {
        partnerId,
        mode: commonv1.Mode.LIVE,
        declaredBytes: declared === undefined ? undefined : BigInt(declared),
      },
    },
  };
  for (let sent = 0; sent < size; sent += 256 * 1024)
    yield { part: { case: "chunk", value: Buffer.alloc(Math.min(256 * 1024, size - sent), "a") } };
  yield { part: { case: "trailer", value: { elderAddress: ELDER } } };
}

const refusal = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (err: unknown) => {
      const r = reasonOf(err);
      if (!r) throw RpcError.from(err);
      return r;
    },
  );

/** Polls until the store's answer to a 1-byte check is STORE_FULL (each replica reads the total at most once a second). */
async function untilFull(partnerId: string) {
  for (const deadline = Date.now() + 10_000; ; ) {
    const r = await refusal(client.checkStorageQuota({ partnerId, mode: commonv1.Mode.LIVE, declaredBytes: 1n }));
    if (r?.reason === ErrorReason.STORE_FULL) return r;
    if (Date.now() > deadline) throw new Error(`the store never reported full: ${JSON.stringify(r)}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

describe("the store-wide high-water mark", () => {
  it("past it, every partner's new upload is refused fast with STORE_FULL and Retry-After, nothing stored; freed room admits uploads again", async () => {
    const [a, b, c] = [newId("ptr"), newId("ptr"), newId("ptr")];
    // Two partners, each within its own 2 MiB quota, fill the store to its 3 MiB mark.
    expect(await refusal(client.submitFile(upload(a, 1.5 * MiB, 1.5 * MiB)))).toBeNull();
    expect(await refusal(client.submitFile(upload(b, 1.5 * MiB, 1.5 * MiB)))).toBeNull();

    // A third partner, whose own quota is untouched, is refused before its body: the check, then the upload itself.
    expect(await untilFull(c)).toEqual({
      reason: ErrorReason.STORE_FULL,
      retryAfterSeconds: STORE_FULL_RETRY_AFTER_SECONDS,
    });
    const uploadsBefore = await store.uploads.countDocuments({});
    expect(await refusal(client.submitFile(upload(c, 64 * 1024)))).toMatchObject({ reason: ErrorReason.STORE_FULL });
    expect(await store.uploads.countDocuments({ partnerId: c, discardedAt: null })).toBe(0);
    expect(await store.files.countDocuments({ partnerId: c })).toBe(0);
    expect(await store.uploads.countDocuments({})).toBeLessThanOrEqual(uploadsBefore + 1);

    // The retention sweep deleted a's file: room again.
    await bytesDeleted(store, a, "live", 1.5 * MiB);
    for (const deadline = Date.now() + 10_000; ; ) {
      const r = await refusal(client.submitFile(upload(c, 64 * 1024, 64 * 1024)));
      if (r === null) break;
      expect(r.reason).toBe(ErrorReason.STORE_FULL);
      if (Date.now() > deadline) throw new Error("the store stayed full after room was freed");
      await new Promise((res) => setTimeout(res, 100));
    }
  });
});
