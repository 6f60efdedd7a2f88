import { fork, type ChildProcess } from "node:child_process";
import { join } from "node:path";

// Processes of the bench other than the system: the load generator (bench/drivers/load.mjs) and the
// bare baselines (bench/drivers/koa-baseline.mjs, http-sink.mjs), each forked so that it ends with
// the bench, and each on an event loop of its own.

const drivers = join(process.cwd(), "bench", "drivers");

export interface AutocannonResult {
  seconds: number;
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  latency: { p50: number; p90: number; p99: number; max: number; mean: number };
}

export interface UploadResult {
  status: number;
  ms: number;
  id?: string;
  error?: string;
}

export interface UploadSpec {
  url: string;
  token?: string;
  elder: string;
  /** Generated plain text of this many bytes, the given bytes, or a file's. */
  size?: number;
  base64?: string;
  path?: string;
  filename?: string;
}

/** The load generator: one forked process that runs one command per call (several may overlap). */
export class LoadGenerator {
  private readonly child: ChildProcess;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: unknown): void }>();
  private nextId = 1;

  constructor() {
    // The generator must not be the bottleneck of a 25 MB body: a large young generation helps.
    this.child = fork(join(drivers, "load.mjs"), [], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      execArgv: ["--max-semi-space-size=32"],
    });
    this.child.on("message", (m: { id: number; result?: unknown; error?: string }) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.error) p.reject(new Error(m.error));
      else p.resolve(m.result);
    });
    this.child.on("exit", () => {
      for (const p of this.pending.values()) p.reject(new Error("the load generator exited"));
      this.pending.clear();
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  private run<T>(cmd: Record<string, unknown>): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ ...cmd, id });
    });
  }

  autocannon(options: Record<string, unknown>): Promise<AutocannonResult> {
    return this.run({ op: "autocannon", options });
  }

  uploads(
    spec: UploadSpec & { count: number; concurrency: number; deadline?: number },
  ): Promise<{ seconds: number; bodyBytes: number; results: UploadResult[] }> {
    return this.run({ op: "uploads", ...spec });
  }

  paced(
    spec: UploadSpec & { rate: number; seconds: number },
  ): Promise<{ sentSeconds: number; lastAnswerAt: number; results: UploadResult[] }> {
    return this.run({ op: "paced", ...spec });
  }

  /** GETs `url` one after another until the returned stop() is called; [startedAt epoch ms, latency ms, status] each. */
  probe(url: string, token: string, pauseMs = 0) {
    const probe = this.nextId;
    const done = this.run<{ samples: [number, number, number][] }>({
      op: "probe",
      probe: this.nextId,
      url,
      token,
      pauseMs,
    });
    return {
      stop: async () => {
        await this.run({ op: "stop", probe });
        return (await done).samples;
      },
    };
  }

  close(): void {
    this.child.disconnect();
  }
}

/** A bare baseline server in a process of its own; resolves once it listens. */
export async function startBaseline(
  script: "koa-baseline.mjs" | "auth-baseline.mjs" | "http-sink.mjs",
  env: Record<string, string> = {},
) {
  const child = fork(join(drivers, script), [], {
    stdio: ["ignore", "pipe", "inherit", "ipc"],
    env: { ...process.env, ...env },
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /listening (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.once("exit", (code) => reject(new Error(`${script} exited (${code}) before listening`)));
  });
  return {
    pid: child.pid!,
    baseUrl: `http://127.0.0.1:${port}`,
    stop: () => {
      if (child.connected) child.disconnect();
    },
  };
}
