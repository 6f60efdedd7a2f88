import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MongoClient } from "mongodb";
import { clientsFor, type FileIntakeClient } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { commonv1, type fileintakev1 } from "@pi/proto";
import { startFileIntakeService } from "../src/service.js";
import { openFileStore, keyId, type FileStore } from "../src/store.js";
import { extractionWorker } from "./extraction-worker.js";
import type { ConnectionCheck } from "../src/intake.js";
import { as, testSettings } from "../../../test/support/services.js";

// Two replicas of file-intake (two started instances, each with its own MongoClient) on one
// database, racing on one idempotency key and on one file's extraction lease. No lock is shared.

type Request = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
const ELDER = "apple.banana.cherry@elders.example";
const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
const connections: ConnectionCheck = async () => true;

let settings: Settings;
const replicas: RunningService[] = [];
let clients: FileIntakeClient[];
const mongos: MongoClient[] = [];
let stores: FileStore[];

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++) {
    // Passive: no consumer and no sweeps, so nothing but the test writes the records it races on.
    replicas.push(
      await startFileIntakeService(settings, createLogger(`file-intake-${i}`, settings.LOG_LEVEL), {
        connections,
        passive: true,
      }),
    );
  }
  clients = replicas.map((r) =>
    clientsFor({ ...as(settings, "gateway"), FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${r.port}` }).fileIntake(),
  );
  for (let i = 0; i < 2; i++) mongos.push(await MongoClient.connect(settings.MONGODB_URI));
  stores = await Promise.all(
    mongos.map((m) => openFileStore(m.db(databaseName(settings.DATA_NAMESPACE, "file-intake")))),
  );
});

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.stop()));
  await mongos[0]?.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).dropDatabase();
  await Promise.all(mongos.map((m) => m.close()));
});

async function* upload(partnerId: string, bytes: Uint8Array, key: string): AsyncGenerator<Request> {
  yield { part: { case: "header", value: { partnerId, mode: commonv1.Mode.LIVE, idempotencyKey: key } } };
  yield { part: { case: "chunk", value: bytes } };
  yield { part: { case: "trailer", value: { elderAddress: ELDER } } };
}

describe("two replicas racing", () => {
  it("one Idempotency-Key sent eight times at once to both replicas: one claim wins, one file, every answer names it", async () => {
    const partnerId = newId("ptr");
    const bytes = fixture("sample.txt");
    // A generous deadline: the losers wait for the winner's commit, and this machine may be loaded.
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        clients[i % 2]!.submitFile(upload(partnerId, bytes, "race-key"), { timeoutMs: 60_000 }),
      ),
    );
    const ids = new Set(answers.map((a) => a.file!.id));
    expect(ids.size).toBe(1);
    expect(await stores[0]!.files.countDocuments({ partnerId })).toBe(1);
    expect(await stores[1]!.keys.findOne({ _id: keyId(partnerId, "live", "race-key") })).toMatchObject({
      state: "committed",
      fileId: [...ids][0],
    });
  });

  it("two extraction workers take one file at once, each through another file-intake replica: while one holds the lease the three other takes are refused, and the file is extracted once", async () => {
    const res = await clients[0]!.submitFile(upload(newId("ptr"), fixture("sample.png"), newId("key")));
    const id = res.file!.id;
    let extractions = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const extract = async () => {
      extractions++;
      await held;
      return { ok: true as const, kind: "image-dimensions" as const, width: 64, height: 48 };
    };
    const workers = replicas.map((r) => extractionWorker(settings, r.port, extract));
    const settled: string[] = [];
    const takes = [
      workers[0]!.process(id),
      workers[1]!.process(id),
      workers[0]!.process(id),
      workers[1]!.process(id),
    ].map((take) =>
      take.then((outcome) => {
        settled.push(outcome);
        return outcome;
      }),
    );
    // The race, made to happen: the winner cannot end before its extraction is released, so the
    // three other takes, through both replicas, are answered while it holds the lease, each refused.
    for (let i = 0; settled.length < 3 && i < 3000; i++) await new Promise((r) => setTimeout(r, 10));
    try {
      expect(settled).toEqual(["skipped", "skipped", "skipped"]);
    } finally {
      release();
    }
    const results = await Promise.all(takes);
    expect(results.filter((r) => r === "processed")).toHaveLength(1);
    expect(results.filter((r) => r === "skipped")).toHaveLength(3);
    expect(extractions).toBe(1);
    expect(await stores[1]!.files.findOne({ _id: id })).toMatchObject({
      status: "processed",
      attempts: 1,
      leaseUntil: null,
      leaseToken: null,
    });
  });
});
