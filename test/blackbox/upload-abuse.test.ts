import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { pacedUpload } from "../support/slow-upload.js";
import { startTarget, type Target } from "./target.js";

// One partner opens 40 slow-drip uploads at once; another partner's reads and the deployment's
// readiness must not notice, and every slow upload must end with an envelope error (429 for those
// over the concurrency cap, 408 for those cut off by the minimum rate) in bounded time. Runs
// against any deployment with the default bounds (docs/files.md, "Bounds on uploads").
let target: Target;

beforeAll(async () => {
  target = await startTarget();
});
afterAll(async () => {
  await target?.stop();
});

const SLOW_UPLOADS = 40;
const DRIP = { bytesPerTick: 16, tickMs: 500 }; // 32 B/s, far below the default 16 KiB/s
/** Two windows of the default 10 s, and room for a loaded machine. */
const ANSWER_BOUND_MS = 45_000;

async function partnerToken(name: string): Promise<string> {
  const partner = (await target.ops("partner", "create", "--name", name)) as {
    live: { client_id: string; client_secret: string };
  };
  const res = await fetch(`${target.baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", ...partner.live }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { access_token: string }).access_token;
}

async function connectionTo(token: string): Promise<{ id: string; elder: string }> {
  const elder = ((await target.ops("elder", "create")) as { address: string }).address;
  const res = await fetch(`${target.baseUrl}/v1/connections`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ elder }),
  });
  expect(res.status).toBe(202);
  return { id: ((await res.json()) as { id: string }).id, elder };
}

function p99(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!;
}

/** Status of one readiness probe; a failed connection is asked again once, then counts as 0 (not ready). */
async function readinessStatus(): Promise<number> {
  return fetch(target.readyUrl)
    .catch(() => new Promise((r) => setTimeout(r, 250)).then(() => fetch(target.readyUrl)))
    .then(async (res) => {
      await res.arrayBuffer();
      return res.status;
    })
    .catch(() => 0);
}

describe("abuse: slow-drip uploads (black box)", () => {
  it("40 concurrent slow-drip uploads from one partner leave another partner's reads under 1 s p99 and readiness at 200, and each ends with an envelope error in bounded time", async () => {
    // The baseline: ready before the attack. In a cluster the readiness URL is a kubectl
    // port-forward to one gateway pod, started again when it ends; after a rollout (the cluster
    // tests replace every pod) it is bound to a pod that is gone until a connection finds out, so
    // the first probes can fail for a second or two while the gateway itself is ready.
    for (const until = Date.now() + 60_000; (await readinessStatus()) !== 200; ) {
      if (Date.now() > until) throw new Error(`not ready before the attack: ${target.readyUrl}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    const attacker = await partnerToken("Drip Attacker");
    const attackerConnection = await connectionTo(attacker);
    await target.ops("connection", "approve", attackerConnection.id);
    const reader = await partnerToken("Patient Reader");
    const readerConnection = await connectionTo(reader);

    const uploads = Array.from({ length: SLOW_UPLOADS }, () =>
      pacedUpload(target.baseUrl, attacker, attackerConnection.elder, DRIP),
    );
    let settled = false;
    const answers = Promise.all(uploads.map((u) => u.answer)).finally(() => (settled = true));

    const readMs: number[] = [];
    const readiness: number[] = [];
    // The reader is a well-behaved partner: about 40 reads a second at most, under its own limit of
    // RATE_LIMIT_V1_PER_SECOND (100). Unpaced, a quiet machine answering in under 10 ms let it reach
    // that limit (a 429 of its own making).
    const reads = (async () => {
      while (!settled) {
        const started = performance.now();
        const res = await fetch(`${target.baseUrl}/v1/connections/${readerConnection.id}`, {
          headers: { authorization: `Bearer ${reader}` },
        });
        await res.arrayBuffer();
        expect(res.status).toBe(200);
        readMs.push(performance.now() - started);
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    const probes = (async () => {
      while (!settled) {
        // In a cluster the readiness URL is a kubectl port-forward, which drops a connection now and
        // then: a failed connection is asked again once before it counts (as status 0, not ready).
        readiness.push(await readinessStatus());
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();

    let results: Awaited<typeof answers>;
    try {
      results = await answers;
    } finally {
      // Whatever happened, nothing keeps dripping (or keeps jest from exiting) after the test.
      settled = true;
      for (const u of uploads) u.abort();
      await Promise.allSettled([reads, probes]);
    }
    await Promise.all([reads, probes]);
    for (const answer of results) {
      expect([408, 429]).toContain(answer.status);
      const body = JSON.parse(answer.body) as { error: { code: string } };
      expect(body.error.code).toBe(answer.status === 408 ? "request_timeout" : "rate_limited");
      expect(answer.ms).toBeLessThan(ANSWER_BOUND_MS);
    }
    // Some were over the cap and some were cut off by the rate: both bounds were at work.
    expect(results.some((r) => r.status === 408)).toBe(true);
    expect(results.some((r) => r.status === 429)).toBe(true);
    expect(readMs.length).toBeGreaterThan(20);
    expect(p99(readMs)).toBeLessThan(1000);
    // Readiness (the gateway's own /readyz: target.readyUrl) stayed 200 throughout.
    expect(readiness.length).toBeGreaterThan(0);
    expect(readiness.filter((s) => s !== 200)).toEqual([]);
  });
});
