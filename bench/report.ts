import { appendFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

// One id for every figure of one `npm run bench` (the bench files share a process, not a module registry).
process.env.BENCH_RUN_ID ??= new Date().toISOString();

/** Prints one benchmark's figures and keeps them in .state/bench/results.jsonl (with the run's id). */
export function report(topic: string, figures: Record<string, number | string>): void {
  const rounded = Object.fromEntries(
    Object.entries(figures).map(([k, v]) => [k, typeof v === "number" ? round(v) : v]),
  );
  const width = Math.max(...Object.keys(rounded).map((k) => k.length));
  const lines = Object.entries(rounded).map(([k, v]) => `  ${k.padEnd(width)}  ${v}`);
  process.stdout.write(`\n${topic}\n${lines.join("\n")}\n`);
  const dir = join(process.cwd(), ".state", "bench");
  mkdirSync(dir, { recursive: true });
  appendFileSync(
    join(dir, "results.jsonl"),
    `${JSON.stringify({ topic, at: new Date().toISOString(), run: process.env.BENCH_RUN_ID, ...rounded })}\n`,
  );
}

/** Two decimals, or three significant digits for small values (a ratio of 0.034 stays 0.034). */
function round(v: number): number {
  if (!Number.isFinite(v)) return v;
  return Math.abs(v) >= 1 || v === 0 ? Math.round(v * 100) / 100 : Number(v.toPrecision(3));
}

/** The median of a list of numbers (the mean of the middle two for an even count). */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length === 0 ? NaN : sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The p-th percentile (0..100) of a list of numbers. */
export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
}
