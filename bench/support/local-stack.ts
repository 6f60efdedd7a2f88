import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseSettings, withLocalStackIdentity, type Settings } from "@pi/common";
import { alive, descendants } from "../../test/support/processes.js";

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
  /** Every live process of the stack with what it is (gateway, file-intake, kafka, ...). */
  processes(): { pid: number; name: string }[];
  stop(): Promise<void>;
}

/** Ports from one base, laid out as deploy/checks/schemathesis.sh lays them out. */
export function stackPorts(base: number) {
  return {
    GATEWAY_PORT: base + 80,
    AUTH_SERVICE_PORT: base + 51,
    CONNECTION_SERVICE_PORT: base + 52,
    FILE_INTAKE_SERVICE_PORT: base + 53,
    WEBHOOK_SERVICE_PORT: base + 54,
    AUTH_ADMIN_PORT: base + 61,
    CONNECTION_ADMIN_PORT: base + 62,
    WEBHOOK_ADMIN_PORT: base + 64,
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

export async function startLocalStack(opts: { portBase: number; env?: Record<string, string>; readyTimeoutMs?: number }): Promise<LocalStack> {
  const ports = stackPorts(opts.portBase);
  const stateDir = mkdtempSync(join(process.env.BENCH_STATE_PARENT ?? tmpdir(), "pi-bench-stack-"));
  const url = (port: number) => `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    STATE_DIR: stateDir,
    INFRA_CACHE_DIR: process.env.INFRA_CACHE_DIR ?? join(process.cwd(), ".state", "cache"),
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? "info",
    ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    AUTH_SERVICE_URL: url(ports.AUTH_SERVICE_PORT),
    CONNECTION_SERVICE_URL: url(ports.CONNECTION_SERVICE_PORT),
    FILE_INTAKE_SERVICE_URL: url(ports.FILE_INTAKE_SERVICE_PORT),
    WEBHOOK_SERVICE_URL: url(ports.WEBHOOK_SERVICE_PORT),
    AUTH_ADMIN_URL: url(ports.AUTH_ADMIN_PORT),
    CONNECTION_ADMIN_URL: url(ports.CONNECTION_ADMIN_PORT),
    WEBHOOK_ADMIN_URL: url(ports.WEBHOOK_ADMIN_PORT),
    ...opts.env,
  };
  // The stack provisions and runs its own database and broker; the test run's are not its.
  for (const k of ["MONGODB_URI", "KAFKA_BROKERS", "TEST_MONGODB_URI", "TEST_KAFKA_BROKERS", "NODE_OPTIONS"]) delete env[k];
  if (opts.env?.NODE_OPTIONS) env.NODE_OPTIONS = opts.env.NODE_OPTIONS;

  const log = openSync(join(stateDir, "npm-start.log"), "a");
  // detached: the stack is a process group of its own, which stop() can end as a whole if need be.
  const child: ChildProcess = spawn(process.execPath, [join(process.cwd(), "deploy", "local", "dist", "start.js")], {
    env,
    stdio: ["ignore", log, log],
    detached: true,
  });
  const pid = child.pid!;
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
      if ((await fetch(`${baseUrl}/readyz`)).status === 200) break;
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

  const settings = parseSettings({
    AUTH_SERVICE_URL: env.AUTH_SERVICE_URL,
    CONNECTION_SERVICE_URL: env.CONNECTION_SERVICE_URL,
    FILE_INTAKE_SERVICE_URL: env.FILE_INTAKE_SERVICE_URL,
    WEBHOOK_SERVICE_URL: env.WEBHOOK_SERVICE_URL,
    AUTH_ADMIN_URL: env.AUTH_ADMIN_URL,
    CONNECTION_ADMIN_URL: env.CONNECTION_ADMIN_URL,
    WEBHOOK_ADMIN_URL: env.WEBHOOK_ADMIN_URL,
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
    processes: () => [pid, ...descendants(pid)].filter(alive).map((p) => ({ pid: p, name: processName(p) })),
    stop,
  };
}
