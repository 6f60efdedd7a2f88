import { afterAll, beforeAll, it } from "@jest/globals";
import { clientsFor } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import { startWarmGateway } from "@pi/gateway";
import { as, startTestStack, type TestStack } from "../test/support/services.js";
import { accessToken, opsCliEnv, opsFor, runOpsCli } from "../test/support/partner-api.js";
import { NO_RATE_LIMITS } from "../test/support/auth.js";
import { percentile, report } from "./report.js";

// Authentication on the local stack: an authenticated read, and how fast an operator's revocation
// reaches two gateways. Rate limits are lifted so that the figures are of the work itself. Token
// issuance against its bare baseline is in system.bench.ts.

let stack: TestStack;
let second: RunningService;
let ops: ReturnType<typeof opsFor>;

beforeAll(async () => {
  stack = await startTestStack(NO_RATE_LIMITS);
  second = await startWarmGateway(as(stack.settings, "gateway"), createLogger("gateway-2", stack.settings.LOG_LEVEL));
  ops = opsFor(stack.settings);
});
afterAll(async () => {
  await second?.stop();
  await stack?.stop();
});

/** Runs `once` from `concurrency` loops for `seconds`; the latencies of the successes and the failures. */
async function load(concurrency: number, seconds: number, once: () => Promise<boolean>) {
  const latencies: number[] = [];
  let failures = 0;
  const until = performance.now() + seconds * 1000;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) {
        const t = performance.now();
        if (await once()) latencies.push(performance.now() - t);
        else failures++;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return { latencies, failures, perSecond: latencies.length / elapsed };
}

it("authenticated GET /v1/connections/{id} (bearer verified locally, then the connection service)", async () => {
  const p = await ops.partnerCreate({ name: "Bench Reader" });
  const token = await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret);
  const elder = (await ops.elderCreate()).address;
  const created = await fetch(`${stack.baseUrl}/v1/connections`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ elder }),
  });
  const { id } = (await created.json()) as { id: string };
  const once = async () => {
    const res = await fetch(`${stack.baseUrl}/v1/connections/${id}`, { headers: { authorization: `Bearer ${token}` } });
    await res.arrayBuffer();
    return res.status === 200;
  };
  await load(4, 1, once);
  const concurrency = 16;
  const r = await load(concurrency, 8, once);
  // The same with a bad bearer: what the bearer check alone costs (no internal call).
  const refused = await load(concurrency, 3, async () => {
    const res = await fetch(`${stack.baseUrl}/v1/connections/${id}`, {
      headers: { authorization: `Bearer ${token}x` },
    });
    await res.arrayBuffer();
    return res.status === 401;
  });
  report("auth: authenticated GET /v1/connections/{id}", {
    concurrency,
    "requests per second": r.perSecond,
    "p50 ms": percentile(r.latencies, 50),
    "p99 ms": percentile(r.latencies, 99),
    failures: r.failures,
    "401s per second (bad signature)": refused.perSecond,
  });
});

it("revocation reaching two gateways, and the operator CLI's credential revoke end to end", async () => {
  const auth = clientsFor(stack.settings).authAdmin();
  const propagation: number[] = [];
  for (let i = 0; i < 20; i++) {
    const p = await ops.partnerCreate({ name: `Bench Revoke ${i}` });
    const res = await auth.revokeCredential({ clientId: p.live.client_id });
    if (res.propagation?.confirmed === res.propagation?.gateways) propagation.push(Number(res.propagation!.elapsedMs));
  }
  const env = opsCliEnv(stack.settings);
  const cliMs: number[] = [];
  for (let i = 0; i < 8; i++) {
    const p = await ops.partnerCreate({ name: `Bench CLI ${i}` });
    const run = await runOpsCli(env, ["credential", "revoke", p.live.client_id, "--json"]);
    if (run.code !== 0) throw new Error(`credential revoke failed: ${run.stderr}`);
    cliMs.push(run.ms);
  }
  report("auth: revocation propagation (2 gateways) and the CLI", {
    "confirmed by both gateways": `${propagation.length}/20`,
    "propagation p50 ms (write to last gateway's confirmation)": percentile(propagation, 50),
    "propagation max ms": Math.max(...propagation),
    "CLI credential revoke p50 ms (process start to exit)": percentile(cliMs, 50),
    "CLI credential revoke max ms": Math.max(...cliMs),
  });
});
