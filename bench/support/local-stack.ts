import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseSettings, type Settings } from "@pi/common/runtime/settings";
import { freePort } from "../../deploy/local/src/infra.js";
import {
  SERVICE_URL_SETTINGS,
  withLocalStackAddresses,
  withLocalStackIdentity,
} from "../../deploy/local/src/state-files.js";
import { alive, descendants } from "../../test/support/processes.js";
import { everyReplicaServes } from "../../test/support/replicas.js";

// The system under measurement, started exactly as `npm start` starts it (the compiled
// deploy/local/dist/start.js: its own database and Kafka, every service a process of its own, under
// the local supervisor), in a temporary STATE_DIR and on ports of its own, so that the gateway's
// event loop is nobody else's and every process of the stack can be found under one pid.

export interface LocalStack {
  baseUrl: string;
  /** Settings that reach this stack's internal services (for the operator commands). */
  settings: Settings;
  stateDir: string;
  /** The `npm start` process; every other process of the stack descends from it. */
  pid: number;
  /** From the start of `npm start` until /readyz answered 200 and every replica served. */
  readyMs: number;
  /** Every live process of the stack with what it is (gateway, file-intake, kafka, ...). */
  processes(): { pid: number; name: string }[];
  stop(): Promise<void>;
}

/**
 * Ports from one base: the gateway's, the database's and Kafka's. The services' are left to the
 * stack, which gives each replica a port of its own and lists them all in its stack.json: a
 * `*_SERVICE_URL` set here would name one replica only, and every call would go to it (the bench
 * measured one replica of each service on the call path until 2026-11-26).
 */
export function stackPorts(base: number) {
  return {
    GATEWAY_PORT: base + 80,
    MONGODB_PORT: base - 983,
    KAFKA_PORT: base + 1092,
    KAFKA_CONTROLLER_PORT: base + 1093,
  };
}

/** A readable name for a process of the stack, from its command line. */
export function processName(pid: number): string {
  let cmd: string;
  try {
    cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
  } catch {
    return "gone";
  }
  const service = /services\/([a-z-]+)\/dist\/main\.js/.exec(cmd);
  if (service) return service[1]!;
  if (cmd.includes("deploy/local/dist/start.js")) return "local-stack";
  if (/kafka/i.test(cmd)) return "kafka";
  if (/mongo/i.test(cmd)) return "database";
  return cmd.split(" ")[0]!.split("/").pop() || `pid ${pid}`;
}

/** Ports the kernel says are free now: for a stack that must not collide with another suite's. */
async function freeStackPorts(): Promise<ReturnType<typeof stackPorts>> {
  return {
    GATEWAY_PORT: await freePort(),
    MONGODB_PORT: await freePort(),
    KAFKA_PORT: await freePort(),
    KAFKA_CONTROLLER_PORT: await freePort(),
  };
}

/**
 * A local stack as `npm start` runs it; on ports from `portBase` (the bench's) or, without one, on free
 * ports; in `stateDir` (an empty directory the caller made, removed by stop()) or a new temporary one.
 */
export async function startLocalStack(opts: {
  portBase?: number;
  env?: Record<string, string>;
  readyTimeoutMs?: number;
  stateDir?: string;
}): Promise<LocalStack> {
  const ports = opts.portBase === undefined ? await freeStackPorts() : stackPorts(opts.portBase);
  const stateDir = opts.stateDir ?? mkdtempSync(join(process.env.BENCH_STATE_PARENT ?? tmpdir(), "pi-bench-stack-"));
  const url = (port: number) => `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    STATE_DIR: stateDir,
    INFRA_CACHE_DIR: process.env.INFRA_CACHE_DIR ?? join(process.cwd(), ".state", "cache"),
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? "info",
    ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    ...opts.env,
  };
  // The stack provisions and runs its own database and broker; the test run's are not its. Its
  // services take free ports (stackPorts).
  for (const k of [
    "MONGODB_URI",
    "KAFKA_BROKERS",
    "TEST_MONGODB_URI",
    "TEST_KAFKA_BROKERS",
    "NODE_OPTIONS",
    ...SERVICE_URL_SETTINGS,
  ])
    delete env[k];
  for (const k of Object.keys(env)) if (/_(SERVICE|ADMIN)_PORT$/.test(k)) delete env[k];
  if (opts.env?.NODE_OPTIONS) env.NODE_OPTIONS = opts.env.NODE_OPTIONS;

  const log = openSync(join(stateDir, "npm-start.log"), "a");
  // detached: the stack is a process group of its own, which stop() can end as a whole if need be.
  const child: ChildProcess = spawn(process.execPath, [join(process.cwd(), "deploy", "local", "dist", "start.js")], {
    env,
    stdio: ["ignore", log, log],
    detached: true,
  });
  const pid = child.pid!;
  const started = performance.now();
  const baseUrl = url(ports.GATEWAY_PORT);

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      let timer: NodeJS.Timeout | undefined;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      // npm start stops within 20 s; a busy machine may take longer.
      await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 40_000)))]);
      clearTimeout(timer);
    }
    try {
      process.kill(-pid, "SIGKILL"); // whatever outlived the supervisor's own stop
    } catch {
      // the group is gone
    }
    if (process.env.BENCH_KEEP_STATE !== "1") rmSync(stateDir, { recursive: true, force: true });
  };

  const deadline = Date.now() + (opts.readyTimeoutMs ?? 300_000);
  for (;;) {
    try {
      if ((await fetch(`${baseUrl}/readyz`)).status === 200 && (await everyReplicaServes(stateDir))) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline || child.exitCode !== null) {
      const tail = readFileSync(join(stateDir, "npm-start.log"), "utf8").split("\n").slice(-20).join("\n");
      await stop();
      throw new Error(`the local stack did not get ready; npm start said:\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  const readyMs = performance.now() - started;

  const settings = parseSettings({
    ...withLocalStackAddresses({}, stateDir),
    MONGODB_URI: `mongodb://127.0.0.1:${ports.MONGODB_PORT}/`,
    KAFKA_BROKERS: `127.0.0.1:${ports.KAFKA_PORT}`,
    GATEWAY_PORT: String(ports.GATEWAY_PORT),
    ...(opts.env?.ADDRESS_DOMAIN ? { ADDRESS_DOMAIN: opts.env.ADDRESS_DOMAIN } : {}),
    // The operator CLI's identity, as `npm start` generated it in the state directory.
    ...withLocalStackIdentity({}, stateDir, "ops"),
  });
  return {
    baseUrl,
    settings,
    stateDir,
    pid,
    readyMs,
    processes: () => [pid, ...descendants(pid)].filter(alive).map((p) => ({ pid: p, name: processName(p) })),
    stop,
  };
}
