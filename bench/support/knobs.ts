// The sizes and durations of bench/system.bench.ts, each an environment variable. BENCH_QUICK=1
// shrinks every default to a run of about two minutes for developing the bench itself; its figures
// are not the ones to compare.

const quick = process.env.BENCH_QUICK === "1";

function knob(name: string, full: number, short: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return quick ? short : full;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0)
    throw new Error(`${name} must be a non-negative number, not ${JSON.stringify(raw)}`);
  return value;
}

export const MiB = 1024 * 1024;

export const knobs = {
  quick,
  /** Ports of the stack: gateway base+80, database base-983, Kafka base+1092/1093 (its services take free ports). */
  portBase: knob("BENCH_PORT_BASE", 44000, 44000),
  /** Alternating rounds of each comparison (system then baseline, then baseline then system, ...). */
  rounds: knob("BENCH_ROUNDS", 4, 2),
  /** Seconds of load per side per round (request/response comparisons). */
  roundSeconds: knob("BENCH_ROUND_SECONDS", 4, 2),
  /**
   * Seconds of load on each side before the rounds of a request/response comparison: the system's
   * four processes on the path (two gateways, two auth replicas) reach their optimised code later
   * than a one-process baseline. At 20 connections, after 5 s its token rounds still rose 2,005 ->
   * 2,544 req/s (CPU per request 1.03 -> 0.67 ms); after 15 s they held at 2,244-2,601.
   */
  warmupSeconds: knob("BENCH_WARMUP_SECONDS", 15, 2),
  /**
   * Open connections of the load generator in request/response comparisons: 20, as issue 36 measured
   * its token figure (partners poll and fetch tokens from many workers at once). With 8, fewer
   * requests share a turn of a gateway's event loop, so fewer share a call (docs/performance.md).
   */
  connections: knob("BENCH_CONNECTIONS", 20, 8),
  /** Size of the large upload, MiB (the spec's 25 MB limit is 25 MiB; the file must fit under it). */
  uploadMiB: knob("BENCH_UPLOAD_MIB", 25, 5),
  /** Rounds of the single-upload comparison (one upload per side per round). */
  uploadRounds: knob("BENCH_UPLOAD_ROUNDS", 3, 2),
  /** 1: each single-upload round waits for extraction of the earlier uploads first (the figure before issue 23; 0, the default, drains nothing). */
  uploadDrain: knob("BENCH_UPLOAD_DRAIN", 0, 0) === 1,
  /** Rounds of the 1 MB upload comparison (one upload per side per round). */
  smallUploads: knob("BENCH_SMALL_UPLOADS", 30, 6),
  /** Concurrent uploads of the memory figure. */
  concurrentUploads: knob("BENCH_CONCURRENT_UPLOADS", 8, 8),
  /** MiB uploaded to the system, all phases together, before the second GET measurement. */
  fillMiB: knob("BENCH_FILL_MIB", 500, 60),
  /** No bulk upload starts after this many seconds of the phase (a slow system still ends the run). */
  fillMaxSeconds: knob("BENCH_FILL_MAX_SECONDS", 180, 60),
  /** Uploads in flight at once while filling. */
  fillConcurrency: knob("BENCH_FILL_CONCURRENCY", 4, 4),
  /** The longest wait for extraction to catch up (after the bulk data, after the PDFs, before idle), seconds. */
  drainSeconds: knob("BENCH_DRAIN_SECONDS", 60, 30),
  /** The sustained extraction load: small PDFs per second, for this many seconds. */
  pdfRate: knob("BENCH_PDF_RATE", 10, 10),
  pdfSeconds: knob("BENCH_PDF_SECONDS", 60, 10),
  /** Size of the large PDF whose extraction runs beside a GET, MiB. */
  bigPdfMiB: knob("BENCH_BIG_PDF_MIB", 24.9, 5),
  /** The idle CPU window, seconds, and the quiet time before it. */
  idleSeconds: knob("BENCH_IDLE_SECONDS", 60, 10),
  idleSettleSeconds: knob("BENCH_IDLE_SETTLE_SECONDS", 5, 2),
};
