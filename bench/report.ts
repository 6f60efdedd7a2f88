import { appendFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

/** Prints one benchmark's figures and keeps them in .state/bench/results.jsonl. */
export function report(topic: string, figures: Record<string, number | string>): void {
  const rounded = Object.fromEntries(Object.entries(figures).map(([k, v]) => [k, typeof v === "number" ? Math.round(v * 100) / 100 : v]));
  const width = Math.max(...Object.keys(rounded).map((k) => k.length));
  const lines = Object.entries(rounded).map(([k, v]) => `  ${k.padEnd(width)}  ${v}`);
  process.stdout.write(`\n${topic}\n${lines.join("\n")}\n`);
  const dir = join(process.cwd(), ".state", "bench");
  mkdirSync(dir, { recursive: true });
  appendFileSync(join(dir, "results.jsonl"), `${JSON.stringify({ topic, at: new Date().toISOString(), ...rounded })}\n`);
}

/** The p-th percentile (0..100) of a list of numbers. */
export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
}
