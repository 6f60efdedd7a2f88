import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MongoClient } from "mongodb";
import { clientsFor } from "@pi/common/clients";
import { createLogger } from "@pi/common/logger";
import { databaseName } from "@pi/common/mongo";
import { newId } from "@pi/common/ids";
import type { RunningService } from "@pi/common/run-service";
import type { Settings } from "@pi/common/settings";
import { commonv1, fileintakev1 } from "@pi/proto";
import { startFileIntakeService } from "@pi/file-intake";
import { ExtractorDied } from "../src/extractor.js";
import { ExtractionWorker, type Extract } from "../src/worker.js";
import { as, testSettings } from "../../../test/support/services.js";

// Poison handling: a file that kills its extractor every time ends `failed` (reason extractor_died)
// after the allowed number of takes, counted on file-intake's record, so it holds across extraction
// replicas and their restarts; never a crash loop, never `processed` by luck.

type Request = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
const ELDER = "apple.banana.cherry@elders.example";
const fixture = (name: string) => readFileSync(new URL(`../../file-intake/test/fixtures/${name}`, import.meta.url));

let settings: Settings;
const intakes: RunningService[] = [];
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++) {
    // Passive: no relay and no sweeps; the test drives the extraction workers.
    intakes.push(await startFileIntakeService(settings, createLogger(`file-intake-${i}`, settings.LOG_LEVEL), { connections: { isActive: async () => true }, passive: true }));
  }
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await Promise.all(intakes.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).dropDatabase();
  await mongo?.close();
});

async function* upload(bytes: Uint8Array): AsyncGenerator<Request> {
  yield { part: { case: "header", value: { partnerId: newId("ptr"), mode: commonv1.Mode.LIVE, idempotencyKey: newId("key") } } };
  yield { part: { case: "chunk", value: bytes } };
  yield { part: { case: "trailer", value: { elderAddress: ELDER } } };
}

/** An extraction replica: its own worker, through its own file-intake replica. */
function replica(i: number, extract: Extract): ExtractionWorker {
  const client = clientsFor({ ...as(settings, "extraction"), FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[i]!.port}` }).fileIntake();
  return new ExtractionWorker(client, { leaseMs: 300, heartbeatMs: 10_000, stuckAfterMs: 0, maxAttempts: 3 }, createLogger("extraction", "silent"), extract);
}

describe("poison handling", () => {
  it("a file that kills its extractor on every take, on either of two replicas, ends failed (extractor_died) after 3 takes", async () => {
    const gateway = clientsFor({ ...as(settings, "gateway"), FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[0]!.port}` }).fileIntake();
    const id = (await gateway.submitFile(upload(fixture("sample.png")))).file!.id;
    let deaths = 0;
    const dies: Extract = async () => {
      deaths++;
      throw new ExtractorDied("signal SIGKILL");
    };
    const replicas = [replica(0, dies), replica(1, dies)];
    const files = mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).collection("files");
    const outcomes: string[] = [];
    for (let take = 0; outcomes.at(-1) !== "failed" && take < 20; take++) {
      // Each take after its lease ran out (the dead extractor renews nothing), by the replicas in turn.
      outcomes.push(await replicas[take % 2]!.process(id));
      await new Promise((r) => setTimeout(r, 350));
    }
    expect(outcomes).toEqual(["died", "died", "died", "failed"]);
    expect(deaths).toBe(3);
    expect(await files.findOne({ _id: id as never })).toMatchObject({ status: "failed", failureReason: "extractor_died", attempts: 4, leaseToken: null });
    // Done: a later event or sweep finds nothing to take.
    expect(await replicas[0]!.process(id)).toBe("failed");
  });

  it("a child killed on its limits is decided at once: the file fails with the reason, not taken again", async () => {
    const gateway = clientsFor({ ...as(settings, "gateway"), FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[1]!.port}` }).fileIntake();
    const id = (await gateway.submitFile(upload(fixture("sample.png")))).file!.id;
    const overCeiling: Extract = async () => ({ ok: false, kind: "image-dimensions", reason: "memory_limit", error: "extraction used more than 512 MiB" });
    expect(await replica(1, overCeiling).process(id)).toBe("failed");
    const files = mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).collection("files");
    expect(await files.findOne({ _id: id as never })).toMatchObject({ status: "failed", failureReason: "memory_limit", attempts: 1 });
  });
});
