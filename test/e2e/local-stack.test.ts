import { afterAll, describe, expect, it } from "@jest/globals";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { alive, descendants } from "../support/processes.js";
import { accessToken } from "../support/partner-api.js";
import { portOpen } from "../../deploy/local/src/infra.js";

// `npm start` as an operator runs it: real processes, its own MongoDB-wire server and Kafka, its own ports.
const stateDir = mkdtempSync(join(tmpdir(), "pi-stack-"));
// Only the gateway port is set: the database, Kafka and every service replica take free ports, and the
// operator CLI finds the services through the stack's STATE_DIR.
const env: NodeJS.ProcessEnv = {
  ...process.env,
  STATE_DIR: stateDir,
  INFRA_CACHE_DIR: join(process.cwd(), ".state", "cache"),
  GATEWAY_PORT: "48080",
  LOG_LEVEL: "info",
};
for (const name of ["MONGODB_URI", "KAFKA_BROKERS", "MONGODB_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "SERVICE_REPLICAS"]) delete env[name];
for (const s of ["AUTH", "CONNECTION", "FILE_INTAKE", "WEBHOOK"]) for (const plane of ["SERVICE", "ADMIN"]) delete env[`${s}_${plane}_PORT`], delete env[`${s}_${plane}_URL`];
const baseUrl = "http://127.0.0.1:48080";
let stack: ChildProcess | undefined;
// Every process the stack ever had, so a failed test still leaves nothing behind.
const seen = new Set<number>();
const remember = () => stack?.pid && descendants(stack.pid).forEach((p) => seen.add(p));

afterAll(() => {
  remember();
  for (const pid of [stack?.pid, ...seen]) if (pid && alive(pid)) process.kill(pid, "SIGKILL");
  if (process.env.KEEP_STACK_STATE !== "1") rmSync(stateDir, { recursive: true, force: true });
});

function npmStart(): ChildProcess {
  const out = openSync(join(stateDir, "npm-start.log"), "a");
  return spawn("npm", ["start"], { env, stdio: ["ignore", out, out] });
}

async function waitReady(timeoutMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < timeoutMs && stack?.exitCode === null) {
    remember();
    try {
      if ((await fetch(`${baseUrl}/readyz`)).status === 200) return Date.now() - started;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  const tail = readFileSync(join(stateDir, "npm-start.log"), "utf8").split("\n").slice(-15).join("\n");
  throw new Error(`${stack?.exitCode === null ? "not ready" : "exited"} within ${timeoutMs} ms; logs in ${stateDir}/logs; npm start said:\n${tail}`);
}

function ops(...args: string[]) {
  const r = spawnSync("npm", ["run", "--silent", "ops", "--", ...args], { env, encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

async function stopAndCheckNothingLeft(child: ChildProcess): Promise<number> {
  remember();
  const tree = descendants(child.pid!);
  expect(tree.length).toBeGreaterThanOrEqual(14); // below npm: its shell, the supervisor, the MongoDB-wire server, Kafka, two replicas of five services
  const started = Date.now();
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  await exited;
  const deadline = Date.now() + 20_000;
  while (tree.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  expect(tree.filter(alive)).toEqual([]);
  return Date.now() - started;
}

describe("npm start (the operator contract's local stack)", () => {
  it("reaches /readyz, serves the operator CLI and the token endpoint, and SIGTERM leaves no process running", async () => {
    stack = npmStart();
    await waitReady(240_000);

    const created = ops("partner", "create", "--name", "Acme", "--json");
    expect(created.status).toBe(0);
    const lines = created.stdout.trim().split("\n");
    expect(lines).toHaveLength(1);
    const partner = JSON.parse(lines[0]!) as { partner_id: string; live: { client_id: string; client_secret: string }; test: object; signing_secret: string };
    expect(Object.keys(partner).sort()).toEqual(["live", "partner_id", "signing_secret", "test"]);
    expect(Object.keys(partner.live).sort()).toEqual(["client_id", "client_secret"]);
    expect(await accessToken(baseUrl, partner.live.client_id, partner.live.client_secret)).toMatch(/^ey/);

    const bad = ops("partner", "suspend", "ptr_doesnotexist", "--json");
    expect(bad.status).not.toBe(0);
    expect(bad.stdout).toBe("");
    expect(bad.stderr.trim().split("\n")).toHaveLength(1);

    // Service identities (docs/security.md, "Internal calls"): a key per workload kept under
    // STATE_DIR, readable by the owner alone; the CLI signs as ops, which every admin RPC admits,
    // and with another workload's key it is refused before it calls anything.
    const identities = join(stateDir, "service-identity.json");
    expect(statSync(identities).mode & 0o777).toBe(0o600);
    const keys = JSON.parse(readFileSync(identities, "utf8")) as Record<string, string>;
    expect(Object.keys(keys).sort()).toEqual(["auth", "connection", "extraction", "file-intake", "gateway", "ops", "webhook"]);
    const asGateway = spawnSync("npm", ["run", "--silent", "ops", "--", "info", "--json"], { env: { ...env, SERVICE_IDENTITY_KEY: keys.gateway }, encoding: "utf8" });
    expect(asGateway.status).toBe(2);
    expect(asGateway.stderr).toBe("invalid setting SERVICE_IDENTITY_KEY: it is the key of gateway, not of ops\n");

    // Two replicas of every service and of the gateway; a crashed one is restarted by the supervisor,
    // as Kubernetes would restart its pod, while the other serves.
    const replicas = (service: string) =>
      descendants(stack!.pid!).filter((pid) => {
        try {
          return alive(pid) && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(`services/${service}/dist/main.js`);
        } catch {
          return false;
        }
      });
    for (const service of ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"]) expect(replicas(service)).toHaveLength(2);
    // Both auth replicas listen before one is killed (/readyz needs only one of them).
    const authPorts = (JSON.parse(readFileSync(join(stateDir, "stack.json"), "utf8")) as { AUTH_SERVICE_URL: string }).AUTH_SERVICE_URL.split(",").map((url) => Number(new URL(url).port));
    for (const deadline = Date.now() + 60_000; !(await Promise.all(authPorts.map((p) => portOpen(p)))).every(Boolean) && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 200));
    const [killed, other] = replicas("auth");
    process.kill(killed!, "SIGKILL");
    // The other replica serves at once: the call the gateway makes finds the dead replica's
    // connection refused or broken, and goes to the other one (IssueTokens is idempotent).
    const token = await accessToken(baseUrl, partner.live.client_id, partner.live.client_secret);
    expect(token).toMatch(/^ey/);
    const deadline = Date.now() + 30_000;
    while (replicas("auth").length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(replicas("auth")).toContain(other);
    expect(replicas("auth")).toHaveLength(2);
    await waitReady(30_000);

    const stopMs = await stopAndCheckNothingLeft(stack);
    expect(stopMs).toBeLessThan(20_000);

    // A second start on the same STATE_DIR keeps the data of the first.
    stack = npmStart();
    const readyMs = await waitReady(60_000);
    expect(readyMs).toBeLessThan(60_000);
    expect(await accessToken(baseUrl, partner.live.client_id, partner.live.client_secret)).toMatch(/^ey/);
    await stopAndCheckNothingLeft(stack);
  }, 420_000);
});
