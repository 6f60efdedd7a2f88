import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Piscina } from "piscina";
import { acceptedType } from "@pi/common";
import type { ExtractionTask } from "./extraction-thread.js";
import type { Extracted } from "./extracted.js";

export { MAX_STORED_TEXT_CHARS, type Extracted } from "./extracted.js";

// Extraction runs in worker threads (extraction-thread.ts), never in the thread that serves the
// RPCs: pdf.js replaces globals when it loads, parses a large file for seconds, and a hostile file
// (a FlateDecode bomb, a page of millions of operators) must cost its own thread, not the service.
// Each file is bounded in time, JS heap, decoded stream bytes and the process's memory growth;
// whatever breaks a bound ends as `{ ok: false }` (the file `failed`). docs/files.md, "Extraction".

export interface ExtractionLimits {
  /** Wall time of one file; past it the thread is stopped. */
  timeoutMs: number;
  /** The thread's JS heap (V8 old generation), in MiB; past it the thread dies. */
  maxHeapMb: number;
  /** What a PDF's zlib streams may decode to, in bytes, checked before pdf.js parses it. */
  maxDecodedBytes: number;
  /** Growth of the process's resident memory while one file runs (buffers outside the JS heap). */
  maxMemoryGrowthMb: number;
}

export const DEFAULT_EXTRACTION_LIMITS: ExtractionLimits = {
  timeoutMs: 90_000,
  maxHeapMb: 384,
  maxDecodedBytes: 256 * 1024 * 1024,
  maxMemoryGrowthMb: 768,
};

/** The compiled thread module; under jest the sources are TypeScript, so the build's (npm test builds first). */
function threadModule(): string {
  const beside = fileURLToPath(new URL("./extraction-thread.js", import.meta.url));
  return existsSync(beside) ? beside : fileURLToPath(new URL("../dist/extraction-thread.js", import.meta.url));
}

const MEMORY_POLL_MS = 50;

export class Extractor {
  private readonly pool: Piscina<ExtractionTask, Extracted>;
  private closed = false;

  constructor(readonly limits: ExtractionLimits = DEFAULT_EXTRACTION_LIMITS) {
    // One thread: one file at a time per process, so the memory watch below measures that file.
    // Idle threads exit (no cost while nothing arrives) and never keep the process alive.
    this.pool = new Piscina({
      filename: threadModule(),
      minThreads: 0,
      maxThreads: 1,
      idleTimeout: 30_000,
      atomics: "disabled",
      resourceLimits: { maxOldGenerationSizeMb: limits.maxHeapMb, maxYoungGenerationSizeMb: 32 },
    });
  }

  /** Runs the extraction of the file's type. Never throws for bad bytes or a broken limit: that is `{ ok: false }`. */
  async extract(mediaType: string, bytes: Uint8Array): Promise<Extracted> {
    const type = acceptedType(mediaType);
    if (!type) return { ok: false, kind: "plain-text", error: `no extraction for ${mediaType}` };
    const kind = type.extraction;
    const data = new Uint8Array(bytes); // the thread's own copy, moved to it without another
    const abort = new AbortController();
    let broken: string | undefined;
    const stop = (why: string) => {
      broken ??= why;
      abort.abort();
    };
    const timer = setTimeout(() => stop(`extraction took longer than ${this.limits.timeoutMs} ms`), this.limits.timeoutMs);
    const rssAtStart = process.memoryUsage.rss();
    const memoryWatch = setInterval(() => {
      if (process.memoryUsage.rss() - rssAtStart > this.limits.maxMemoryGrowthMb * 1024 * 1024) {
        stop(`extraction used more than ${this.limits.maxMemoryGrowthMb} MiB`);
      }
    }, MEMORY_POLL_MS);
    try {
      return await this.pool.run({ kind, mediaType, bytes: data, maxDecodedBytes: this.limits.maxDecodedBytes }, { signal: abort.signal, transferList: [data.buffer] });
    } catch (err) {
      if (broken) return { ok: false, kind, error: broken };
      if (this.closed) throw err; // the service is stopping: the file stays for another take
      if ((err as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY") return { ok: false, kind, error: `extraction used more than ${this.limits.maxHeapMb} MiB of heap` };
      // The thread died on these bytes (a parser's uncaught error): the same would happen again.
      return { ok: false, kind, error: `extraction thread failed: ${err instanceof Error ? err.message : String(err)}`.slice(0, 500) };
    } finally {
      clearTimeout(timer);
      clearInterval(memoryWatch);
    }
  }

  close(): Promise<void> {
    this.closed = true;
    return this.pool.destroy();
  }
}

let shared: Extractor | undefined;

/** Extraction with the default limits, in the process's one extraction thread (started on first use). */
export function extract(mediaType: string, bytes: Uint8Array): Promise<Extracted> {
  shared ??= new Extractor();
  return shared.extract(mediaType, bytes);
}
