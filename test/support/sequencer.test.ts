import { describe, expect, it } from "@jest/globals";
import LaneFirstSequencer from "./sequencer.mjs";

// test/support/sequencer.mjs: without durations (a clean clone), whole-stack and deploy files start
// before integration and unit files, each lane by size as jest orders it; durations, when jest has
// them, keep jest's order.

const rootDir = "/repo";

function fakeTests(files: Record<string, number>, durations: Record<string, number> = {}) {
  const hasteFS = { getSize: (path: string) => files[path.slice(rootDir.length + 1)] };
  const context = { config: { rootDir, cache: false, id: "unit" }, hasteFS };
  const sequencer = new LaneFirstSequencer({});
  // jest's cache of durations, as the sequencer reads it (cache: false leaves it empty otherwise).
  const cache = Object.fromEntries(Object.entries(durations).map(([file, ms]) => [`${rootDir}/${file}`, [0, ms]]));
  (sequencer as unknown as { _cache: Map<unknown, unknown> })._cache.set(context, cache);
  const tests = Object.keys(files).map((file) => ({ path: `${rootDir}/${file}`, context }));
  return { order: () => sequencer.sort(tests as never).map((t: { path: string }) => t.path.slice(rootDir.length + 1)) };
}

describe("the test sequencer", () => {
  it("starts e2e, then deploy, then integration, then unit files when no durations are known, each lane by size", () => {
    const { order } = fakeTests({
      "services/auth/test/big.test.ts": 90_000,
      "services/auth/test/small.test.ts": 1_000,
      "services/auth/test/store.integration.test.ts": 20_000,
      "test/deploy/image.test.ts": 2_000,
      "test/e2e/short.test.ts": 5_000,
      "test/e2e/long.test.ts": 40_000,
    });
    expect(order()).toEqual([
      "test/e2e/long.test.ts",
      "test/e2e/short.test.ts",
      "test/deploy/image.test.ts",
      "services/auth/test/store.integration.test.ts",
      "services/auth/test/big.test.ts",
      "services/auth/test/small.test.ts",
    ]);
  });

  it("keeps jest's order, slowest first, for files whose durations it knows; files without one follow, by lane", () => {
    const { order } = fakeTests(
      {
        "services/auth/test/a.test.ts": 1_000,
        "test/e2e/b.test.ts": 1_000,
        "services/auth/test/new.test.ts": 9_000,
        "test/deploy/new.test.ts": 1_000,
      },
      { "services/auth/test/a.test.ts": 90_000, "test/e2e/b.test.ts": 30_000 },
    );
    expect(order()).toEqual([
      "services/auth/test/a.test.ts",
      "test/e2e/b.test.ts",
      "test/deploy/new.test.ts",
      "services/auth/test/new.test.ts",
    ]);
  });
});
