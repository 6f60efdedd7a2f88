import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common";
import { freePort } from "../support/gateway-process.js";
import { alive, descendants } from "../support/processes.js";
import { runOpsCli } from "../support/partner-api.js";
import { sendFile } from "../support/files.js";
import { everyReplicaServes } from "../support/replicas.js";
import { drawingOperatorsPdf, hexFlateBombPdf } from "../../services/extraction/test/hostile-pdfs.js";

// Extraction as a workload of its own, under `npm start` (two processes of every service): hostile
// PDFs end `failed` with their reason while uploads keep answering 202 and no file-intake process
// restarts; killing an extraction process loses no file; and a request that comes while no gateway
// process runs is answered or reset at once, never left hanging (issue 23).

const stateDir = mkdtempSync(join(tmpdir(), "pi-extraction-"));
const env: NodeJS.ProcessEnv = {
  ...process.env,
  STATE_DIR: stateDir,
  INFRA_CACHE_DIR: join(process.cwd(), ".state", "cache"),
  LOG_LEVEL: "info",
  RATE_LIMIT_TOKEN_PER_MINUTE: "100000",
  RATE_LIMIT_V1_PER_SECOND: "100000",
};
for (const name of ["MONGODB_URI", "KAFKA_BROKERS", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "SERVICE_REPLICAS"]) delete env[name];
for (const s of ["AUTH", "CONNECTION", "FILE_INTAKE", "WEBHOOK"]) for (const plane of ["SERVICE", "ADMIN"]) delete env[`${s}_${plane}_PORT`], delete env[`${s}_${plane}_URL`];

let stack: ChildProcess | undefined;
let baseUrl = "";
let mongoUri = "";
const seen = new Set<number>();
const remember = () => stack?.pid && descendants(stack.pid).forEach((p) => seen.add(p));

/** Longer than this without an answer is a hang. */
const HANG_MS = 10_000;

function processesOf(service: string): number[] {
  return descendants(stack!.pid!).filter((pid) => {
    try {
      return alive(pid) && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(`services/${service}/dist/main.js`);
    } catch {
      return false;
    }
  });
}

let token = "";
let elder = "";

async function upload(bytes: Buffer, filename: string, contentType: string) {
  return sendFile(baseUrl, token, elder, bytes, { key: randomUUID(), filename, contentType });
}

async function fileRecord(id: string) {
  const client = await MongoClient.connect(mongoUri);
  try {
    return await client.db(databaseName("pi", "file-intake")).collection("files").findOne({ _id: id as never });
  } finally {
    await client.close();
  }
}

async function statusOf(id: string): Promise<string> {
  const res = await fetch(`${baseUrl}/v1/files/${id}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(HANG_MS) });
  return ((await res.json()) as { status: string }).status;
}

async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function ops(...args: string[]) {
  const r = await runOpsCli({ PATH: process.env.PATH, STATE_DIR: stateDir }, [...args, "--json"]);
  if (r.code !== 0) throw new Error(`ops ${args.join(" ")} failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown> & { live: { client_id: string; client_secret: string } };
}

beforeAll(async () => {
  const [port, mongoPort] = [await freePort(), await freePort()];
  env.GATEWAY_PORT = String(port);
  env.MONGODB_PORT = String(mongoPort);
  baseUrl = `http://127.0.0.1:${port}`;
  mongoUri = `mongodb://127.0.0.1:${mongoPort}/`;
  const out = openSync(join(stateDir, "start.log"), "a");
  stack = spawn(process.execPath, [join(process.cwd(), "deploy", "local", "dist", "start.js")], { env, stdio: ["ignore", out, out] });
  await until("the stack ready, every replica serving, both extraction processes up", 420_000, async () => {
    remember();
    const readyz = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(3_000) });
    return readyz.status === 200 && (await everyReplicaServes(stateDir)) && processesOf("extraction").length === 2 ? true : undefined;
  });
  const created = await ops("partner", "create", "--name", "Extraction Clinic");
  elder = (await ops("elder", "create")).address as string;
  const tokenRes = await fetch(`${baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", client_id: created.live.client_id, client_secret: created.live.client_secret }),
  });
  token = ((await tokenRes.json()) as { access_token: string }).access_token;
  const con = (await (await fetch(`${baseUrl}/v1/connections`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: JSON.stringify({ elder }) })).json()) as { id: string };
  await ops("connection", "approve", con.id);
}, 480_000);

afterAll(async () => {
  remember();
  if (stack?.exitCode === null) stack.kill("SIGTERM");
  const deadline = Date.now() + 20_000;
  while ([...seen].some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  for (const pid of [stack?.pid, ...seen]) if (pid && alive(pid)) process.kill(pid, "SIGKILL");
  if (process.env.KEEP_STACK_STATE !== "1") rmSync(stateDir, { recursive: true, force: true });
});

describe("hostile PDFs under npm start", () => {
  it("a hex-wrapped Flate bomb (1 GiB decoded) and a 25 MB PDF of millions of drawing operators each end failed within 2 minutes, uploads keep answering 202, no file-intake process restarts", async () => {
    const intakeBefore = processesOf("file-intake").sort();
    expect(intakeBefore).toHaveLength(2);
    const bombPdf = hexFlateBombPdf(1024);
    const drawing = drawingOperatorsPdf(24);
    const sentAt = Date.now();
    const hostile = await Promise.all([upload(bombPdf, "bomb.pdf", "application/pdf"), upload(drawing, "drawing.pdf", "application/pdf")]);
    expect(hostile.map((r) => r.status)).toEqual([202, 202]);
    const ids = hostile.map((r) => r.json!.id as string);

    // Uploads while the hostile files are handled: every one answered 202.
    const statuses: number[] = [];
    const done = () => Promise.all(ids.map(statusOf)).then((s) => s.every((x) => x !== "received"));
    while (!(await done()) && Date.now() - sentAt < 120_000) {
      const res = await upload(Buffer.from(`Care note ${randomUUID()}\n`), "note.txt", "text/plain");
      statuses.push(res.status);
    }
    expect(Date.now() - sentAt).toBeLessThan(120_000);
    expect(statuses.length).toBeGreaterThan(0);
    expect(statuses.filter((s) => s !== 202)).toEqual([]);
    for (const id of ids) {
      expect(await statusOf(id)).toBe("failed");
      // The reason is on the record, a code only.
      expect(await fileRecord(id)).toMatchObject({ status: "failed", failureReason: "decoded_size" });
    }
    expect(processesOf("file-intake").sort()).toEqual(intakeBefore);
  }, 300_000);
});

describe("an extraction process killed", () => {
  it("loses nothing: every file accepted around the kill ends processed, and uploads keep answering 202", async () => {
    const [victim] = processesOf("extraction");
    expect(victim).toBeDefined();
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await upload(Buffer.from(`Medication list ${i} ${randomUUID()}\n`), "list.txt", "text/plain");
      expect(res.status).toBe(202);
      ids.push(res.json!.id as string);
      if (i === 4) process.kill(victim!, "SIGKILL");
    }
    // A file the killed process held is taken again once its lease runs out (20 s), by the stuck sweep.
    for (const id of ids) expect(await until(`file ${id} processed`, 120_000, async () => ((await statusOf(id)) === "processed" ? true : undefined))).toBe(true);
  }, 180_000);
});

describe("no gateway process running", () => {
  it("a request then is refused or reset at once, never left hanging", async () => {
    const gateways = processesOf("gateway");
    expect(gateways).toHaveLength(2);
    const outcomes: { ms: number; outcome: string }[] = [];
    let stop = false;
    const client = async () => {
      while (!stop) {
        const started = Date.now();
        try {
          const res = await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(HANG_MS), headers: { connection: "close" } });
          await res.text();
          outcomes.push({ ms: Date.now() - started, outcome: String(res.status) });
        } catch (err) {
          outcomes.push({ ms: Date.now() - started, outcome: (err as Error).name === "TimeoutError" ? "hang" : "refused or reset" });
        }
      }
    };
    const clients = Array.from({ length: 8 }, client);
    while (outcomes.length < 50) await new Promise((r) => setTimeout(r, 20));
    for (const pid of gateways) process.kill(pid, "SIGKILL");
    const killedAt = Date.now();
    await until("a refused or reset request", 10_000, async () => (outcomes.some((o) => o.outcome === "refused or reset") ? true : undefined));
    // Until the supervisor has both back and they answer again.
    await until("the gateways back", 60_000, async () => (processesOf("gateway").length === 2 && outcomes.slice(-20).every((o) => o.outcome === "200") && Date.now() - killedAt > 2_000 ? true : undefined));
    stop = true;
    await Promise.all(clients);
    expect(outcomes.filter((o) => o.outcome === "hang")).toEqual([]);
    expect(Math.max(...outcomes.map((o) => o.ms))).toBeLessThan(HANG_MS);
  }, 120_000);
});
