import { fork, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { getPriority, setPriority } from "node:os";
import { fileURLToPath } from "node:url";
import { acceptedType } from "@pi/common/rules/media-types";
import { MAX_STORED_TEXT_CHARS, type Extracted } from "@pi/common/rules/extracted";
import type { ExtractionTask } from "./extraction-child.js";
import { childEnvironment } from "./child-environment.js";

// Each file is decoded in a child process (pdf.js replaces globals; a hostile file costs that child only), killed
// past its memory, CPU-time or wall-time limit and replaced on the next file (docs/files.md, "Extraction").

export const DEFAULT_EXTRACTION_LIMITS = {
  timeoutMs: 60_000,
  cpuTimeMs: 30_000,
  /** Resident memory (heap and buffers). */
  memoryCeilingMb: 512,
  /** The text kept of a PDF (the rest is counted in its length). */
  maxTextChars: MAX_STORED_TEXT_CHARS,
};
export type ExtractionLimits = typeof DEFAULT_EXTRACTION_LIMITS;

/** Thrown when the child died of something that is not one of our limits: the file is not decided here. */
export class ExtractorDied extends Error {
  constructor(why: string) {
    super(`the extraction child died: ${why}`);
    this.name = "ExtractorDied";
  }
}

/** The compiled child module (under jest, the build's). */
function childModule(): string {
  const beside = fileURLToPath(new URL("./extraction-child.js", import.meta.url));
  return existsSync(beside) ? beside : fileURLToPath(new URL("../dist/extraction-child.js", import.meta.url));
}

const WATCH_EVERY_MS = 10;
/** How long a new child may take to start (not counted in a file's time limit). */
const CHILD_START_MS = 30_000;
const PAGE_BYTES = 4096;
/**
 * How much nicer than its parent the child runs (capped at 19, the lowest priority): decoding comes
 * after everything else, its own parent's reads and lease heartbeats included (main.ts lowers the
 * service's own priority; docs/performance.md, "Uploads beside extraction").
 */
export const CHILD_NICE_INCREMENT = 10;

/** USER_HZ: 100 on every architecture Node runs on. */
const CLOCK_TICK_MS = 10;

/** CPU time (user and system) in ms and resident bytes of a process; undefined once it is gone. */
function usage(pid: number | undefined): { cpuMs: number; residentBytes: number } | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    // After the command name (in parentheses, which may hold spaces): state is field 3, utime 14, stime 15, rss 24.
    const fields = stat
      .slice(stat.lastIndexOf(")") + 2)
      .split(" ")
      .map(Number);
    return { cpuMs: (fields[11]! + fields[12]!) * CLOCK_TICK_MS, residentBytes: fields[21]! * PAGE_BYTES };
  } catch {
    return undefined;
  }
}

export class Extractor {
  private child: { process: ChildProcess; ready: Promise<void> } | undefined;
  private running: { child: ChildProcess; settle(result: Extracted | Error): void } | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(readonly limits: ExtractionLimits = DEFAULT_EXTRACTION_LIMITS) {}

  private spawnChild(): { process: ChildProcess; ready: Promise<void> } {
    // The heap's own bound, below the ceiling (a V8 out-of-memory then ends the child before the watch does).
    const heapMb = Math.max(32, Math.floor(this.limits.memoryCeilingMb * 0.75));
    const child = fork(childModule(), [], {
      execArgv: [`--max-old-space-size=${heapMb}`, "--max-semi-space-size=16"],
      serialization: "advanced",
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      env: childEnvironment(process.env),
    });
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new ExtractorDied("it did not start in time")), CHILD_START_MS);
      child.on("message", (msg: { ready?: true; result?: Extracted }) => {
        if (msg.ready) {
          clearTimeout(timer);
          resolve();
        } else if (msg.result && this.running?.child === child) this.running.settle(msg.result);
      });
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        const died = new ExtractorDied(signal ? `signal ${signal}` : `exit code ${code}`);
        reject(died);
        if (this.child?.process === child) this.child = undefined;
        if (this.running?.child === child) this.running.settle(died);
      });
    });
    ready.catch(() => child.kill("SIGKILL"));
    try {
      setPriority(child.pid!, Math.min(19, getPriority() + CHILD_NICE_INCREMENT));
    } catch {
      // Already gone: its exit settles what waits on it.
    }
    child.on("error", () => undefined); // an IPC send to a dead child; its exit settles the file
    return { process: child, ready };
  }

  /** Bad bytes or a broken limit give `{ ok: false }`; throws ExtractorDied otherwise. */
  extract(mediaType: string, bytes: Uint8Array): Promise<Extracted> {
    const next = this.queue.then(() => this.runOne(mediaType, bytes));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async runOne(mediaType: string, bytes: Uint8Array): Promise<Extracted> {
    const type = acceptedType(mediaType);
    if (!type)
      return { ok: false, kind: "plain-text", reason: "unsupported_type", error: `no extraction for ${mediaType}` };
    if (this.closed) throw new ExtractorDied("the extractor is closed");
    const kind = type.extraction;
    this.child ??= this.spawnChild();
    const { process: child, ready } = this.child;
    await ready;
    let broken: Extracted | undefined;
    const kill = (reason: "memory_limit" | "time_limit", error: string) => {
      broken ??= { ok: false, kind, reason, error };
      child.kill("SIGKILL");
    };
    const ceiling = this.limits.memoryCeilingMb * 1024 * 1024;
    const started = performance.now();
    const cpuAtStart = usage(child.pid)?.cpuMs;
    const watch = setInterval(() => {
      if (performance.now() - started > this.limits.timeoutMs)
        kill("time_limit", `extraction took longer than ${this.limits.timeoutMs} ms`);
      const now = usage(child.pid);
      if (now && now.residentBytes > ceiling)
        kill("memory_limit", `extraction used more than ${this.limits.memoryCeilingMb} MiB`);
      if (now && cpuAtStart !== undefined && now.cpuMs - cpuAtStart > this.limits.cpuTimeMs)
        kill("time_limit", `extraction used more than ${this.limits.cpuTimeMs} ms of CPU time`);
    }, WATCH_EVERY_MS);
    try {
      const result = await new Promise<Extracted | Error>((settle) => {
        this.running = { child, settle };
        child.send({ kind, mediaType, bytes, maxTextChars: this.limits.maxTextChars } satisfies ExtractionTask);
      });
      if (broken) return broken;
      if (result instanceof Error) {
        // V8's own heap limit ends the child with an abort: that is the memory ceiling too.
        if (/SIGABRT|SIGTRAP|exit code 134/.test(result.message))
          return { ok: false, kind, reason: "memory_limit", error: `extraction used more than its heap` };
        throw result;
      }
      return result;
    } finally {
      this.running = undefined;
      clearInterval(watch);
    }
  }

  /** The child's pid while one runs (tests). */
  get childPid(): number | undefined {
    return this.child?.process.pid;
  }

  async close(): Promise<void> {
    this.closed = true;
    const child = this.child?.process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once("exit", () => resolve());
      child.kill("SIGKILL");
    });
  }
}
