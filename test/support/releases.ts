import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { descendants, alive } from "./processes.js";

// Earlier releases, built once and run as an operator runs them (test/e2e/upgrades.test.ts). A
// commit is taken from git by its id alone (releases.json: tags need not travel with a clone),
// unpacked with `git archive` into `.state/releases/<commit>` and built there (`npm ci
// --prefer-offline`, `tsc -b`); the folder is kept, so a second run starts at once.

export const repoRoot = process.cwd();

export interface ReleaseList {
  current: string;
  releases: { version: string; tag: string; commit: string; date: string; chart: string }[];
  upgradeFrom: { name: string; commit: string; about: string }[];
}

export const releaseList = (): ReleaseList =>
  JSON.parse(readFileSync(join(repoRoot, "releases.json"), "utf8")) as ReleaseList;

/** Runs at a low CPU priority: the other test files running meanwhile keep the cores their timing tests need. */
function run(cmd: string, args: string[], cwd: string, log: string): void {
  const out = openSync(log, "a");
  const r = spawnSync("nice", ["-n", "10", cmd, ...args], {
    cwd,
    stdio: ["ignore", out, out],
    env: { ...process.env, npm_config_update_notifier: "false" },
  });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} in ${cwd} failed (exit ${r.status ?? r.signal}); see ${log}`);
}

/** The folder of `commit`, unpacked and built (once: later calls find it built). */
export function builtRelease(commit: string): string {
  if (!/^[0-9a-f]{40}$/.test(commit)) throw new Error(`not a full commit id: ${commit}`);
  const dir = join(repoRoot, ".state", "releases", commit);
  if (existsSync(join(dir, ".built"))) return dir;
  const building = `${dir}.building`;
  rmSync(building, { recursive: true, force: true });
  mkdirSync(building, { recursive: true });
  const log = join(repoRoot, ".state", "releases", `${commit}.log`);
  const archive = spawnSync("sh", ["-c", `git -C "$0" archive "$1" | tar -x -C "$2"`, repoRoot, commit, building], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  if (archive.status !== 0)
    throw new Error(`git archive ${commit} failed (is the clone's history there?): ${String(archive.stderr)}`);
  run("npm", ["ci", "--no-audit", "--no-fund", "--prefer-offline"], building, log);
  run("npm", ["run", "build"], building, log);
  writeFileSync(join(building, ".built"), `${new Date().toISOString()}\n`);
  renameSync(building, dir);
  return dir;
}

/** One `npm start` of one build on one STATE_DIR. */
export interface RunningStack {
  dir: string;
  baseUrl: string;
  child: ChildProcess;
  /** The operator CLI of the same build: its --json object, or throws with its stderr. */
  ops(...args: string[]): Record<string, unknown>;
  /** SIGTERM, as an operator stops it; waits until none of its processes is left. */
  stop(): Promise<void>;
}

const stackEnvDropped = [
  "MONGODB_URI",
  "KAFKA_BROKERS",
  "MONGODB_PORT",
  "KAFKA_PORT",
  "KAFKA_CONTROLLER_PORT",
  "SERVICE_REPLICAS",
  "DATA_NAMESPACE",
];

/** The environment of `npm start` on `stateDir`: only the gateway port, the state and the settings given. */
export function stackEnv(stateDir: string, port: number, settings: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    STATE_DIR: stateDir,
    GATEWAY_PORT: String(port),
    INFRA_CACHE_DIR: process.env.INFRA_CACHE_DIR ?? join(repoRoot, ".state", "cache"),
    LOG_LEVEL: "info",
    ...settings,
  };
  for (const name of stackEnvDropped) if (!(name in settings)) delete env[name];
  for (const s of ["AUTH", "CONNECTION", "FILE_INTAKE", "WEBHOOK", "EXTRACTION"])
    for (const plane of ["SERVICE", "ADMIN"]) {
      delete env[`${s}_${plane}_PORT`];
      delete env[`${s}_${plane}_URL`];
    }
  return env;
}

/** Starts `npm start` in `dir` and waits for /readyz (200). */
export async function startStack(dir: string, env: NodeJS.ProcessEnv, timeoutMs = 180_000): Promise<RunningStack> {
  const stateDir = env.STATE_DIR!;
  const log = join(stateDir, "npm-start.log");
  const out = openSync(log, "a");
  writeFileSync(log, `\n==== npm start in ${dir} at ${new Date().toISOString()}\n`, { flag: "a" });
  const child = spawn("npm", ["start"], { cwd: dir, env, stdio: ["ignore", out, out] });
  const baseUrl = `http://127.0.0.1:${env.GATEWAY_PORT}`;
  const seen = new Set<number>();
  const remember = () => {
    if (child.pid) for (const p of descendants(child.pid)) seen.add(p);
  };
  const stop = async () => {
    remember();
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 25_000)))]);
      clearTimeout(timer);
    }
    const deadline = Date.now() + 20_000;
    while ([...seen].some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    for (const pid of seen) if (alive(pid)) process.kill(pid, "SIGKILL");
  };
  const started = Date.now();
  for (;;) {
    remember();
    try {
      if ((await fetch(`${baseUrl}/readyz`)).status === 200) break;
    } catch {
      // not listening yet
    }
    if (child.exitCode !== null || Date.now() - started > timeoutMs) {
      await stop();
      const tail = readFileSync(log, "utf8").split("\n").slice(-20).join("\n");
      throw new Error(
        `npm start in ${dir} ${child.exitCode === null ? "not ready" : "exited"} within ${timeoutMs} ms; logs in ${stateDir}/logs:\n${tail}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  const ops = (...args: string[]) => {
    // As the operator contract runs it: each release's own `npm run ops` (this one's fills in the local stack's addresses and key).
    const r = spawnSync("npm", ["run", "--silent", "ops", "--", ...args, "--json"], {
      cwd: dir,
      env,
      encoding: "utf8",
      timeout: 30_000,
    });
    if (r.status !== 0) throw new Error(`ops ${args.join(" ")} (${dir}) failed: ${r.stderr}`);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };
  return { dir, baseUrl, child, ops, stop };
}
