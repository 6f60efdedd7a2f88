import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../support/gateway-process.js";
import { alive, descendants } from "../support/processes.js";
import { runOpsCli } from "../support/partner-api.js";
import { sendFile } from "../support/files.js";
import { SERVICE_URL_SETTINGS } from "@pi/common";
import { everyReplicaServes } from "../support/replicas.js";

// The local stack as `npm start` runs it (two replicas of every service and of the gateway, free
// internal ports), under a partner's traffic while one replica of each service after the other is
// killed outright, then while the database and Kafka are killed.

const stateDir = mkdtempSync(join(tmpdir(), "pi-replicas-"));
const env: NodeJS.ProcessEnv = {
  ...process.env,
  STATE_DIR: stateDir,
  INFRA_CACHE_DIR: join(process.cwd(), ".state", "cache"),
  LOG_LEVEL: "info",
  // The traffic comes from one address at a pace of its own: the limits are not what is measured here.
  RATE_LIMIT_TOKEN_PER_MINUTE: "100000",
  RATE_LIMIT_V1_PER_SECOND: "100000",
};
// Only the gateway port is chosen; everything else takes free ports.
for (const name of ["MONGODB_URI", "KAFKA_BROKERS", "MONGODB_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "SERVICE_REPLICAS"]) delete env[name];
for (const s of ["AUTH", "CONNECTION", "FILE_INTAKE", "WEBHOOK"]) for (const plane of ["SERVICE", "ADMIN"]) delete env[`${s}_${plane}_PORT`], delete env[`${s}_${plane}_URL`];

let stack: ChildProcess | undefined;
let baseUrl = "";
const seen = new Set<number>();
const remember = () => stack?.pid && descendants(stack.pid).forEach((p) => seen.add(p));

/** A partner answer is due within this long, whatever fails behind the gateway. */
const ANSWER_WITHIN_MS = 5_000;
/** A replica told to stop with Kafka away is gone within this long (its own grace is 15 s, then exit 1). */
const STOP_WITHIN_MS = 10_000;
/** Longer than this without an answer is a hang. */
const HANG_MS = 15_000;

function processesOf(service: string): number[] {
  const marker = service === "mongo-wire" ? "mongo-wire" : service === "kafka" ? "kafka.Kafka" : `services/${service}/dist/main.js`;
  return descendants(stack!.pid!).filter((pid) => {
    try {
      return alive(pid) && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(marker);
    } catch {
      return false;
    }
  });
}

/**
 * The stack answers /readyz and every replica of every service serves (a replica still starting must
 * not leave the test killing the only one that serves).
 */
async function ready(timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && stack?.exitCode === null) {
    remember();
    try {
      const readyz = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(3_000) });
      if (readyz.status === 200 && (await everyReplicaServes(stateDir))) return;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`not ready within ${timeoutMs} ms; logs in ${stateDir}/logs`);
}

async function ops(...args: string[]) {
  const r = await runOpsCli({ PATH: process.env.PATH, STATE_DIR: stateDir }, [...args, "--json"]);
  if (r.code !== 0) throw new Error(`ops ${args.join(" ")} failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown> & { live: { client_id: string; client_secret: string } };
}

interface Outcome {
  phase: string;
  op: string;
  status: number | "reset" | "hang";
  ms: number;
  envelope503?: boolean;
}

/** One partner request: its status, or "reset" (the connection to a killed gateway dropped), or "hang". */
async function timed(phaseNow: () => string, op: string, outcomes: Outcome[], send: (signal: AbortSignal) => Promise<Response | { status: number; text: string; headers: Headers }>) {
  const phase = phaseNow();
  const started = Date.now();
  let outcome: Outcome;
  try {
    const signal = AbortSignal.timeout(HANG_MS);
    const res = await Promise.race([send(signal), new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason)))]);
    const text = "text" in res && typeof res.text === "string" ? res.text : await (res as Response).text();
    outcome = { phase, op, status: res.status, ms: Date.now() - started };
    // A failure counts in the phase it happened in (an upload begun just before a replica was killed).
    if (res.status >= 500) outcome.phase = phaseNow();
    if (res.status === 503) {
      const body = JSON.parse(text) as { error?: { code?: string } };
      outcome.envelope503 = body.error?.code === "service_unavailable" && res.headers.get("retry-after") === "1";
    }
    outcome.ms = Date.now() - started;
    outcomes.push(outcome);
    return { status: res.status, text };
  } catch (err) {
    const name = (err as Error).name;
    // A dropped connection counts in the phase it dropped in (a request begun just before a gateway was killed).
    outcome = { phase: phaseNow(), op, status: name === "TimeoutError" || name === "AbortError" ? "hang" : "reset", ms: Date.now() - started };
    outcomes.push(outcome);
    return { status: outcome.status, text: "" };
  }
}

interface Partner {
  token: string;
  elder: string;
  connectionId: string;
  clientId: string;
  clientSecret: string;
}
let partner: Partner;
const accepted = new Map<string, string>(); // file id -> Idempotency-Key

/** A partner at work: tokens, connection requests and reads, uploads and their status, until stopped. */
async function partnerTraffic(phase: () => string, stopped: () => boolean, outcomes: Outcome[]): Promise<void> {
  const json = { "content-type": "application/json", authorization: `Bearer ${partner.token}` };
  for (let n = 0; !stopped(); n++) {
    switch (n % 4) {
      case 0:
        await timed(phase, "token", outcomes, (signal) =>
          fetch(`${baseUrl}/oauth/token`, { method: "POST", signal, headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams({ grant_type: "client_credentials", client_id: partner.clientId, client_secret: partner.clientSecret }) }),
        );
        break;
      case 1:
        await timed(phase, "connect", outcomes, (signal) => fetch(`${baseUrl}/v1/connections`, { method: "POST", signal, headers: json, body: JSON.stringify({ elder: partner.elder }) }));
        break;
      case 2:
        await timed(phase, "read connection", outcomes, (signal) => fetch(`${baseUrl}/v1/connections/${partner.connectionId}`, { signal, headers: json }));
        break;
      case 3: {
        // An upload is retried with its Idempotency-Key until accepted, as a partner would after a 503.
        const key = randomUUID();
        for (let attempt = 0; attempt < 20; attempt++) {
          const res = await timed(phase, "upload", outcomes, () => sendFile(baseUrl, partner.token, partner.elder, Buffer.from(`Medication list ${key}\n`), { key, filename: "list.txt", contentType: "text/plain" }));
          if (res.status === 202) {
            const id = (JSON.parse(res.text) as { id: string }).id;
            accepted.set(id, key);
            await timed(phase, "read file", outcomes, (signal) => fetch(`${baseUrl}/v1/files/${id}`, { signal, headers: json }));
            break;
          }
          await new Promise((r) => setTimeout(r, 200));
        }
        break;
      }
    }
  }
}

beforeAll(async () => {
  const port = await freePort();
  env.GATEWAY_PORT = String(port);
  baseUrl = `http://127.0.0.1:${port}`;
  const out = openSync(join(stateDir, "start.log"), "a");
  stack = spawn(process.execPath, [join(process.cwd(), "deploy", "local", "dist", "start.js")], { env, stdio: ["ignore", out, out] });
  await ready(420_000);

  const created = await ops("partner", "create", "--name", "Chaos Pharmacy");
  const elder = (await ops("elder", "create")).address as string;
  const tokenRes = await fetch(`${baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", client_id: created.live.client_id, client_secret: created.live.client_secret }),
  });
  const token = ((await tokenRes.json()) as { access_token: string }).access_token;
  const con = (await (await fetch(`${baseUrl}/v1/connections`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: JSON.stringify({ elder }) })).json()) as { id: string };
  await ops("connection", "approve", con.id);
  partner = { token, elder, connectionId: con.id, clientId: created.live.client_id, clientSecret: created.live.client_secret };
}, 480_000);

afterAll(async () => {
  remember();
  if (stack?.exitCode === null) {
    stack.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 100));
  }
  const deadline = Date.now() + 20_000;
  while ([...seen].some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  for (const pid of [stack?.pid, ...seen]) if (pid && alive(pid)) process.kill(pid, "SIGKILL");
  if (process.env.KEEP_STACK_STATE !== "1") rmSync(stateDir, { recursive: true, force: true });
});

describe("two replicas of every service (npm start)", () => {
  it("runs two processes of every service and of the gateway, sharing the one partner port", () => {
    for (const service of ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"]) expect(processesOf(service)).toHaveLength(2);
    const recorded = JSON.parse(readFileSync(join(stateDir, "stack.json"), "utf8")) as Record<string, string>;
    for (const name of SERVICE_URL_SETTINGS) expect(recorded[name]!.split(",")).toHaveLength(2);
  });

  it("a replica of each service killed in turn under a partner's traffic: no 5xx, no hang, nothing lost", async () => {
    const outcomes: Outcome[] = [];
    let phase = "steady";
    let stopped = false;
    const traffic = Promise.all(Array.from({ length: 3 }, () => partnerTraffic(() => phase, () => stopped, outcomes)));
    try {
      await new Promise((r) => setTimeout(r, 2_000));
      for (const service of ["auth", "connection", "file-intake", "extraction", "webhook", "gateway"]) {
        const [victim] = processesOf(service);
        expect(victim).toBeDefined();
        phase = `${service} killed`;
        process.kill(victim!, "SIGKILL");
        // Traffic goes on while the replica is gone and while it comes back.
        await new Promise((r) => setTimeout(r, 3_000));
        const deadline = Date.now() + 60_000;
        while (processesOf(service).length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
        await ready(120_000);
        phase = `${service} back`;
        await new Promise((r) => setTimeout(r, 1_000));
      }
    } finally {
      stopped = true;
      await traffic;
    }

    const summary = Object.entries(
      outcomes.reduce<Record<string, Record<string, number>>>((acc, o) => {
        (acc[o.phase] ??= {})[`${o.op} ${o.status}`] = ((acc[o.phase] ??= {})[`${o.op} ${o.status}`] ?? 0) + 1;
        return acc;
      }, {}),
    );
    process.stderr.write(`[replicas-failover] ${JSON.stringify(summary)}\n`);
    expect(outcomes.filter((o) => o.status === "hang")).toEqual([]);
    // An upload under way on the file-intake replica that died fails fast with the envelope 503
    // (a stream cannot be replayed; the partner's retry with the same key is accepted). Nothing else
    // answers 5xx.
    const fiveHundreds = outcomes.filter((o) => typeof o.status === "number" && o.status >= 500);
    expect(fiveHundreds.filter((o) => !(o.op === "upload" && o.phase === "file-intake killed" && o.status === 503 && o.envelope503 && o.ms < ANSWER_WITHIN_MS))).toEqual([]);
    // A partner connection to the gateway process that was killed drops; nowhere else.
    expect(outcomes.filter((o) => o.status === "reset" && o.phase !== "gateway killed")).toEqual([]);
    expect(outcomes.filter((o) => o.status === 200 || o.status === 202).length).toBeGreaterThan(40);

    // Nothing lost: every accepted upload is there.
    expect(accepted.size).toBeGreaterThan(5);
    for (const id of accepted.keys()) expect((await fetch(`${baseUrl}/v1/files/${id}`, { headers: { authorization: `Bearer ${partner.token}` } })).status).toBe(200);
  }, 420_000);

  it.each(["mongo-wire", "kafka"])("with %s killed, every partner answer comes within 5 s: a success or the envelope 503", async (infra) => {
    const outcomes: Outcome[] = [];
    let stopped = false;
    const [victim] = processesOf(infra);
    expect(victim).toBeDefined();
    process.kill(victim!, "SIGKILL");
    const traffic = Promise.all(Array.from({ length: 3 }, () => partnerTraffic(() => `${infra} killed`, () => stopped, outcomes)));
    // Kept down for the whole window: the stack restarts it after 0.5 s, and on a fast machine the
    // database was back before any request needed it (no 503 at all in 6 s).
    const outageEnds = Date.now() + 6_000;
    while (Date.now() < outageEnds) {
      for (const pid of processesOf(infra)) process.kill(pid, "SIGKILL");
      await new Promise((r) => setTimeout(r, 100));
    }
    stopped = true;
    await traffic;
    process.stderr.write(`[replicas-failover] ${infra}: ${JSON.stringify(outcomes.map((o) => `${o.op} ${o.status} ${o.ms}ms`))}\n`);
    expect(outcomes.length).toBeGreaterThan(3);
    expect(outcomes.filter((o) => o.status === "hang" || o.status === "reset")).toEqual([]);
    expect(outcomes.filter((o) => o.ms >= ANSWER_WITHIN_MS)).toEqual([]);
    expect(outcomes.filter((o) => o.status !== 200 && o.status !== 202 && !(o.status === 503 && o.envelope503))).toEqual([]);
    if (infra === "mongo-wire") {
      expect(outcomes.filter((o) => o.status === 503).length).toBeGreaterThan(0);
      await ready(120_000);
    } else {
      // The gateway pods' readiness probe leaves Kafka out, as the internal services' does (health
      // check "traffic"): writes wait in the outboxes, so no replica leaves its Service. The stack as
      // a whole (the operator contract's /readyz) is not ready.
      const traffic = await fetch(`${baseUrl}/readyz/traffic`, { signal: AbortSignal.timeout(3_000) });
      expect(traffic.status).toBe(200);
      const whole = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(5_000) });
      expect([whole.status, ((await whole.json()) as { failing: string[] }).failing.sort()]).toEqual([503, ["auth", "connection", "file-intake", "webhook"]]);
      // A replica told to stop while Kafka is away (every pod of a release stops at once on
      // uninstall) stops well within its 15 s grace, which it would otherwise spend waiting on its
      // consumers' reconnects and then exit 1. (Kafka killed again, should the stack have restarted it.)
      for (const pid of processesOf("kafka")) process.kill(pid, "SIGKILL");
      const stopping = ["auth", "webhook", "gateway"].map((service) => {
        const [pid] = processesOf(service);
        process.kill(pid!, "SIGTERM");
        return { service, pid: pid!, at: Date.now() };
      });
      const stopped = await Promise.all(
        stopping.map(async ({ service, pid, at }) => {
          while (alive(pid) && Date.now() - at < 20_000) await new Promise((r) => setTimeout(r, 100));
          return [service, Date.now() - at < STOP_WITHIN_MS] as const;
        }),
      );
      expect(stopped).toEqual(stopping.map(({ service }) => [service, true]));
    }
  }, 300_000);
});
