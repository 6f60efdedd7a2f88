import { spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common/store/mongo";
import { asService, grantTestKafkaAccess, testSettings } from "../../../test/support/services.js";

// The guard of the store (docs/upgrades.md), as an operator meets it: the compiled service started
// on a store that a newer release marked as readable only from that release on. It must refuse to
// start with one structured log line, exit non-zero, and change nothing (its pending migration
// included).

const settings = testSettings({ LOG_LEVEL: "info" });
const client = await MongoClient.connect(process.env.TEST_MONGODB_URI!);
const db = client.db(databaseName(settings.DATA_NAMESPACE, "file-intake"));

afterAll(async () => {
  await db.dropDatabase().catch(() => undefined);
  await client.close();
});

function runService(): Promise<{ code: number | null; lines: Record<string, unknown>[]; stderr: string }> {
  const env: Record<string, string> = { PATH: process.env.PATH ?? "" };
  for (const [key, value] of Object.entries(asService(settings, "file-intake")))
    if (value !== undefined) env[key] = typeof value === "object" ? JSON.stringify(value) : String(value);
  const child = spawn(process.execPath, [join(process.cwd(), "services", "file-intake", "dist", "main.js")], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      const lines = stdout
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      resolve({ code, lines, stderr });
    });
  });
}

describe("the store's guard", () => {
  it("a service older than the store's oldest reader refuses to start with one log line, and changes nothing", async () => {
    await grantTestKafkaAccess(settings.DATA_NAMESPACE);
    await db.collection("store_version").insertOne({
      _id: "store" as never,
      minReader: "99.0.0",
      collections: { idempotency_keys: 7 },
      migratedBy: "99.0.0",
      migratedAt: new Date(),
    });
    // A key in 4e36e67's shape, which this release's pending migration would move.
    await db.collection("idempotency_keys").insertOne({
      _id: "ptr_a:k" as never,
      partnerId: "ptr_a",
      key: "k",
      fingerprint: "f",
      fileId: "fil_1",
      state: "committed",
      claimedAt: new Date(),
      expiresAt: new Date(),
    });
    const snapshot = async () =>
      Object.fromEntries(
        await Promise.all(
          (await db.listCollections().toArray()).map(
            async (c) => [c.name, await db.collection(c.name).find().toArray()] as const,
          ),
        ),
      );
    const before = await snapshot();

    const { code, lines, stderr } = await runService();

    expect(code).not.toBe(0);
    const problems = lines.filter((l) => ["warn", "error", "fatal"].includes(String(l.level)));
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({
      level: "fatal",
      service: "file-intake",
      store: db.databaseName,
      minReader: "99.0.0",
      release: expect.stringMatching(/^\d+\.\d+\.\d+$/),
    });
    expect(String(problems[0]!.msg)).toMatch(
      /needs release 99\.0\.0 or newer; this is .*: refusing to start \(nothing was changed\)/,
    );
    expect(lines.some((l) => l.msg === "started")).toBe(false);
    expect(stderr.trim()).toBe("");
    expect(await snapshot()).toEqual(before);
  });
});
