import { createRequire } from "node:module";
import { afterEach, describe, expect, it } from "@jest/globals";

// mongodb 6.22's connection pool re-arms a 100 ms timer for as long as the pool is open, to keep up
// a minimum pool size and prune idle connections, even when there is neither (minPoolSize 0, no
// maxIdleTimeMS: the services' settings): ten wake-ups a second in every idle process.
// patches/mongodb+6.22.0.patch (applied by patch-package at install) arms it only when there is
// something to keep up. These tests drive the installed ConnectionPool, so they fail without it.

const require = createRequire(import.meta.url);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const { ConnectionPool } = require("mongodb/lib/cmap/connection_pool.js") as any;

const pools: { close(): void; minPoolSizeTimer: NodeJS.Timeout | undefined }[] = [];
afterEach(() => {
  for (const p of pools.splice(0)) p.close();
});

function readyPool(options: Record<string, unknown>) {
  const pool = new ConnectionPool({ topology: {} }, { hostAddress: { toString: () => "127.0.0.1:1" }, ...options });
  pools.push(pool);
  pool.ready();
  return pool;
}

describe("the MongoDB connection pool's timer (patched)", () => {
  it("is not armed with no minimum pool size and no idle limit", () => {
    expect(readyPool({}).minPoolSizeTimer).toBeUndefined();
  });

  it("is still armed when there is an idle limit to prune by", () => {
    expect(readyPool({ maxIdleTimeMS: 60_000 }).minPoolSizeTimer).toBeDefined();
  });
});
