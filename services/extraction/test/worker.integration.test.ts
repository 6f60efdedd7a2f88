import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MongoClient } from "mongodb";
import { clientsFor } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { commonv1, type fileintakev1 } from "@pi/proto";
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
    intakes.push(
      await startFileIntakeService(settings, createLogger(`file-intake-${i}`, settings.LOG_LEVEL), {
        connections: async () => true,
        passive: true,
      }),
    );
  }
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await Promise.all(intakes.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).dropDatabase();
  await mongo?.close();
});

async function* upload(bytes: Uint8Array, partnerId = newId("ptr")): AsyncGenerator<Request> {
  yield { part: { case: "header", value: { partnerId, mode: commonv1.Mode.LIVE, idempotencyKey: newId("key") } } };
  yield { part: { case: "chunk", value: bytes } };
  yield { part: { case: "trailer", value: { elderAddress: ELDER } } };
}

/** An extraction replica: its own worker, through its own file-intake replica. */
function replica(i: number, extract: Extract): ExtractionWorker {
  const client = clientsFor({
    ...as(settings, "extraction"),
    FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[i]!.port}`,
  }).fileIntake();
  return new ExtractionWorker(
    client,
    { leaseMs: 300, heartbeatMs: 10_000, stuckAfterMs: 0, maxAttempts: 3 },
    createLogger("extraction", "silent"),
    extract,
  );
}

describe("poison handling", () => {
  it("a file that kills its extractor on every take, on either of two replicas, ends failed (extractor_died) after 3 takes", async () => {
    const gateway = clientsFor({
      ...as(settings, "gateway"),
      FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[0]!.port}`,
    }).fileIntake();
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
    expect(await files.findOne({ _id: id as never })).toMatchObject({
      status: "failed",
      failureReason: "extractor_died",
      attempts: 4,
      leaseToken: null,
    });
    // Done: a later event or sweep finds nothing to take.
    expect(await replicas[0]!.process(id)).toBe("failed");
  });

  it("a child killed on its limits is decided at once: the file fails with the reason, not taken again", async () => {
    const gateway = clientsFor({
      ...as(settings, "gateway"),
      FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[1]!.port}`,
    }).fileIntake();
    const id = (await gateway.submitFile(upload(fixture("sample.png")))).file!.id;
    const overCeiling: Extract = async () => ({
      ok: false,
      kind: "image-dimensions",
      reason: "memory_limit",
      error: "extraction used more than 512 MiB",
    });
    expect(await replica(1, overCeiling).process(id)).toBe("failed");
    const files = mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).collection("files");
    expect(await files.findOne({ _id: id as never })).toMatchObject({
      status: "failed",
      failureReason: "memory_limit",
      attempts: 1,
    });
  });
});

describe("one partner after another", () => {
  const gateway = () =>
    clientsFor({
      ...as(settings, "gateway"),
      FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[0]!.port}`,
    }).fileIntake();
  const asExtraction = (i: number) =>
    clientsFor({
      ...as(settings, "extraction"),
      FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${intakes[i]!.port}`,
    }).fileIntake();
  const files = () => mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).collection("files");

  /** Ends every waiting file (earlier tests' too), so that each test starts from no backlog. */
  async function drain() {
    await files().updateMany(
      { status: "received" },
      { $set: { status: "failed", failureReason: "unparseable", leaseUntil: null, leaseToken: null } },
    );
  }

  it("a partner's backlog of six files: the two partners who sent one file after it are taken next, whichever replica takes, and the turns are in the database", async () => {
    await drain();
    const [flooder, second, third] = [newId("ptr"), newId("ptr"), newId("ptr")];
    const partnerOf = new Map<string, string>();
    for (const partner of [...Array<string>(6).fill(flooder), second, third]) {
      partnerOf.set((await gateway().submitFile(upload(fixture("sample.png"), partner))).file!.id, partner);
    }
    const taken: string[] = [];
    // The two file-intake replicas in turn: neither keeps the rotation in memory. Each take holds its lease (a minute), as a busy extraction process does.
    for (let i = 0; ; i++) {
      const next = await asExtraction(i % 2).takeNextFileForExtraction({ leaseMs: 60_000, maxAttempts: 3 });
      if (!next.found) break;
      expect(next.take?.taken).toBe(true);
      taken.push(partnerOf.get(next.fileId)!);
    }
    expect(taken).toEqual([flooder, second, third, flooder, flooder, flooder, flooder, flooder]);
    const turns = mongo.db(databaseName(settings.DATA_NAMESPACE, "file-intake")).collection("extraction_turns");
    expect(await turns.countDocuments({ _id: { $in: [flooder, second, third] } as never })).toBe(3);
  });

  it("a partner who sends while another's backlog is being extracted has its file taken next", async () => {
    await drain();
    const [flooder, late] = [newId("ptr"), newId("ptr")];
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await gateway().submitFile(upload(fixture("sample.png"), flooder))).file!.id);
    // The flooder's turn was just served: its first file is being extracted.
    const first = await asExtraction(0).takeNextFileForExtraction({ leaseMs: 60_000, maxAttempts: 3 });
    expect(first.fileId).toBe(ids[0]);
    const lateId = (await gateway().submitFile(upload(fixture("sample.png"), late))).file!.id;
    expect((await asExtraction(1).takeNextFileForExtraction({ leaseMs: 60_000, maxAttempts: 3 })).fileId).toBe(lateId);
  });

  it("two extraction replicas draining at once extract every file exactly once", async () => {
    await drain();
    const partners = [newId("ptr"), newId("ptr"), newId("ptr")];
    const ids: string[] = [];
    for (let i = 0; i < 9; i++)
      ids.push((await gateway().submitFile(upload(fixture("sample.png"), partners[i % 3]))).file!.id);
    let extractions = 0;
    const extract: Extract = async () => {
      extractions++;
      await new Promise((r) => setTimeout(r, 20));
      return { ok: true, kind: "image-dimensions", width: 64, height: 48 };
    };
    const drainAll = async (worker: ExtractionWorker) => {
      while ((await worker.next()) !== "none");
    };
    await Promise.all([drainAll(replica(0, extract)), drainAll(replica(1, extract))]);
    expect(extractions).toBe(9);
    expect(await files().countDocuments({ _id: { $in: ids } as never, status: "processed" })).toBe(9);
  });
});
