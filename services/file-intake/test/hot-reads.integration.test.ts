import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MongoClient, type Db } from "mongodb";
import { clientsFor } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { LocalKeyWrapper } from "@pi/common/store/data-keys";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { commonv1, type fileintakev1 } from "@pi/proto";
import { startFileIntakeService } from "../src/service.js";
import { fileById } from "../src/routes.js";
import { readBlob } from "./read-blob.js";
import { BLOB_SEGMENTS, keyId, openFileStore, segmentId, type FileDoc } from "../src/store.js";
import { usageKey } from "../src/quota.js";
import { as, testSettings } from "../../../test/support/services.js";
import { queryPlan } from "../../../test/support/query-plan.js";

// The hot reads of file-intake are answered from an index, whatever the collection holds: the
// GET of a file, an Idempotency-Key, a chunk of a stored blob, a storage quota's counter. (On MongoDB this reads `explain`;
// the local server has none, so it applies that server's own rule: test/support/query-plan.ts.)

type Request = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
const ELDER = "apple.banana.cherry@elders.example";

let settings: Settings;
let service: RunningService;
let mongo: MongoClient;
let db: Db;

beforeAll(async () => {
  settings = testSettings();
  service = await startFileIntakeService(settings, createLogger("file-intake", settings.LOG_LEVEL), {
    connections: async () => true,
    passive: true,
  });
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  db = mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake"));
});

afterAll(async () => {
  await service?.stop();
  await db?.dropDatabase();
  await mongo?.close();
});

async function* upload(partnerId: string, bytes: Uint8Array, key: string): AsyncGenerator<Request> {
  yield { part: { case: "header", value: { partnerId, mode: commonv1.Mode.LIVE, idempotencyKey: key } } };
  for (let i = 0; i < bytes.length; i += 256 * 1024)
    yield { part: { case: "chunk", value: bytes.subarray(i, i + 256 * 1024) } };
  yield { part: { case: "trailer", value: { elderAddress: ELDER } } };
}

describe("hot reads use an index", () => {
  it("GET of a file by _id, an Idempotency-Key by its _id, a blob's segments by _id, a partner's storage usage by _id; a filter on partnerId alone does not", async () => {
    const client = clientsFor({
      ...as(settings, "gateway"),
      FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${service.port}`,
    }).fileIntake();
    const partnerId = newId("ptr");
    const bytes = Buffer.concat([
      readFileSync(new URL("./fixtures/sample.txt", import.meta.url)),
      Buffer.alloc(2.5 * 1024 * 1024, 0x61),
    ]);
    const res = await client.submitFile(upload(partnerId, bytes, "hot-key"));
    const file = (await db.collection<FileDoc>("files").findOne(fileById(res.file!.id)))!;

    const plans = {
      file: await queryPlan(db.collection("files"), fileById(file._id)),
      key: await queryPlan(db.collection("idempotency_keys"), { _id: keyId(partnerId, "live", "hot-key") }),
      segment: await queryPlan(db.collection(BLOB_SEGMENTS), { _id: segmentId(file.blobId, 2) }),
      // Read at every upload's reservation (and by a 1.1.0 gateway's CheckStorageQuota).
      usage: await queryPlan(db.collection("storage_usage"), { _id: usageKey(partnerId, "live") }),
    };
    for (const [read, plan] of Object.entries(plans))
      expect({ read, ...plan }).toMatchObject({ read, usesIndex: true });
    // The check can fail: no index serves a filter on the owner alone.
    expect((await queryPlan(db.collection("files"), { partnerId })).usesIndex).toBe(false);

    // And the segment-by-segment read returns the very bytes (three sealed 1 MiB segments, the last partial).
    const read = await readBlob(
      await openFileStore(db),
      file,
      await LocalKeyWrapper.fromSetting(settings.DATA_KEYS!).unwrap(file.dataKey!),
    );
    expect(read.equals(bytes)).toBe(true);
  });
});
