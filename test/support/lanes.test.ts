import { describe, expect, it } from "@jest/globals";
import { readdirSync } from "node:fs";
import { connect, createServer, type AddressInfo } from "node:net";
import { join, relative } from "node:path";
import { lanesOf } from "../lanes.mjs";

// The lanes of test/lanes.mjs, and the unit lane's guard (test/support/unit-environment.mjs) seen
// from inside the unit lane, where this file runs.

const root = process.cwd();

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === "node_modules" || entry.name === "dist" || entry.name.startsWith(".")) return [];
    const path = join(dir, entry.name);
    return entry.isDirectory() ? testFiles(path) : entry.name.endsWith(".test.ts") ? [relative(root, path)] : [];
  });
}

const guard = (globalThis as Record<symbol, unknown>)[Symbol.for("pi.unit-lane.guard")] as { violations: Error[] };

/** Resolves with the error of a connection attempt, or null once it connected. */
function tryConnect(port: number): Promise<Error | null> {
  return new Promise((resolve) => {
    try {
      const socket = connect(port, "127.0.0.1", () => {
        socket.destroy();
        resolve(null);
      });
      socket.once("error", resolve);
    } catch (err) {
      resolve(err as Error);
    }
  });
}

describe("test lanes", () => {
  it("every test file in the repository belongs to exactly one lane", () => {
    const files = testFiles(root);
    expect(files.length).toBeGreaterThan(40);
    expect(
      files.filter((f) => lanesOf(f).length !== 1).map((f) => `${f}: ${lanesOf(f).join(", ") || "no lane"}`),
    ).toEqual([]);
  });

  it("files go to their lane by folder and name", () => {
    expect(lanesOf("services/webhook/test/schedule.test.ts")).toEqual(["unit"]);
    expect(lanesOf("proto/test/generated.integration.test.ts")).toEqual(["integration"]);
    expect(lanesOf("services/webhook/test/dispatcher.integration.test.ts")).toEqual(["integration"]);
    expect(lanesOf("deploy/local/test/supervisor.integration.test.ts")).toEqual(["integration"]);
    expect(lanesOf("test/e2e/files-upload.test.ts")).toEqual(["e2e"]);
    expect(lanesOf("test/blackbox/partner-journey.test.ts")).toEqual(["e2e"]);
    expect(lanesOf("test/deploy/chart.test.ts")).toEqual(["deploy"]);
    expect(lanesOf("services/webhook/test/harness.ts")).toEqual([]);
    expect(lanesOf("node_modules/x/test/a.test.ts")).toEqual([]);
  });
});

describe("the unit lane's guard", () => {
  it("runs without the test infrastructure: no database or Kafka address is handed to unit tests", () => {
    expect(process.env.TEST_MONGODB_URI).toBeUndefined();
    expect(process.env.TEST_KAFKA_BROKERS).toBeUndefined();
  });

  it("refuses a connection to a server this test file did not start, and records it against the test", async () => {
    // An open port of another process is what a database would be; one that nobody listens on
    // would be refused anyway, so the guard must answer first, with its own message.
    const error = await tryConnect(Number(process.env.TEST_MONGODB_PORT ?? 37017));
    expect(error?.message).toMatch(/^unit lane: a connection to 127\.0\.0\.1:\d+, which this test file did not open/);
    expect(guard.violations.splice(0)).toEqual([error]);
  });

  it("lets a test reach a server of its own on loopback", async () => {
    const server = createServer((socket) => socket.end());
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      expect(await tryConnect((server.address() as AddressInfo).port)).toBeNull();
      expect(guard.violations).toEqual([]);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
