import { spawn, type ChildProcess } from "node:child_process";
import cluster from "node:cluster";
import { openSync } from "node:fs";
import type { Logger } from "@pi/common/runtime/logger";

// Workers that share a port accept their connections themselves (SCHED_NONE), from the listening
// socket the primary (this process) passes them. Node's default on Linux (round robin) has the
// primary accept each connection and hand it to a worker over IPC, keeping it open until the worker
// acknowledges: a worker killed in that moment (kill -9 of the gateways under load) left connections
// that nobody would ever answer or close, and their clients waited until their own timeouts (35 s
// was seen). With SCHED_NONE a killed worker's connections close with it, and a request that comes
// while no worker runs is refused. Set before the first fork, as node:cluster requires.
cluster.schedulingPolicy = cluster.SCHED_NONE;

export interface ProcessSpec {
  name: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  logFile: string;
  /**
   * Run as a node:cluster worker of this process (command and args are then node's: execArgv, then
   * the script): workers listening on one port share it, the way several gateway replicas share the
   * partner port (Node 20 has no SO_REUSEPORT). Each worker is still restarted on its own.
   */
  sharesPorts?: boolean;
  /**
   * Environment taken anew before every start, the first and each restart (a free metrics port:
   * the one of the last run may have been taken meanwhile); added to `env`.
   */
  beforeStart?: () => Promise<NodeJS.ProcessEnv>;
}

/**
 * Runs child processes as Kubernetes would run pods: each is restarted with a growing backoff when
 * it exits unexpectedly, and the restart is logged. stop() sends SIGTERM to every child and SIGKILL
 * to what is still running after the grace period.
 */
export class Supervisor {
  private readonly children = new Map<string, ChildProcess>();
  private readonly restarts = new Map<string, number>();
  private stopping = false;

  constructor(private readonly logger: Logger) {}

  async start(spec: ProcessSpec): Promise<void> {
    const fresh = await spec.beforeStart?.();
    if (this.stopping) return;
    const env = { ...spec.env, ...fresh };
    const out = openSync(spec.logFile, "a");
    const child = spec.sharesPorts
      ? fork({ ...spec, env }, out)
      : spawn(spec.command, spec.args, { stdio: ["ignore", out, out], env: { ...process.env, ...env } });
    this.children.set(spec.name, child);
    const startedAt = Date.now();
    child.on("exit", (code, signal) => {
      if (this.children.get(spec.name) === child) this.children.delete(spec.name);
      if (this.stopping) return;
      // A process that ran for a minute starts its backoff afresh.
      const previous = Date.now() - startedAt > 60_000 ? 0 : (this.restarts.get(spec.name) ?? 0);
      const delay = Math.min(500 * 2 ** previous, 15_000);
      this.restarts.set(spec.name, previous + 1);
      this.logger.warn(
        { process: spec.name, code, signal, restartInMs: delay, log: spec.logFile },
        "process exited unexpectedly; restarting",
      );
      setTimeout(() => {
        if (!this.stopping)
          this.start(spec).catch((err: unknown) =>
            this.logger.error({ process: spec.name, err }, "process could not be restarted"),
          );
      }, delay);
    });
  }

  names(): string[] {
    return [...this.children.keys()];
  }

  pid(name: string): number | undefined {
    return this.children.get(name)?.pid;
  }

  /** Stops the named processes in order, each group after the previous one has exited. */
  async stop(groups: string[][], graceMs = 8000): Promise<void> {
    this.stopping = true;
    for (const group of groups) {
      await Promise.all(group.map((name) => this.stopOne(name, graceMs)));
    }
    await Promise.all([...this.children.keys()].map((name) => this.stopOne(name, graceMs)));
  }

  private stopOne(name: string, graceMs: number): Promise<void> {
    const child = this.children.get(name);
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      child.once("exit", () => {
        clearTimeout(timer);
        resolve();
      });
      child.kill("SIGTERM");
    });
  }
}

function fork(spec: ProcessSpec, out: number): ChildProcess {
  const script = spec.args.findIndex((a) => !a.startsWith("-"));
  cluster.setupPrimary({
    exec: spec.args[script],
    execArgv: spec.args.slice(0, script),
    args: spec.args.slice(script + 1),
    stdio: ["ignore", out, out, "ipc"],
  });
  return cluster.fork(spec.env).process;
}
