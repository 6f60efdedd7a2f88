import { nextAttemptAt, type RetryPolicy } from "../src/schedule.js";

// The published retry schedule (docs/partners.md), derived from the policy for the docs and tests.

/** The planned start offsets (seconds after creation) of every attempt, without jitter: for docs and tests. */
export function plannedOffsetsSeconds(p: RetryPolicy): number[] {
  const out = [0];
  for (;;) {
    const last = out[out.length - 1]!;
    const next = nextAttemptAt({ createdAt: 0, attemptsMade: out.length, lastEndedAt: last * 1000 }, p, 0.5);
    if (next === null) return out;
    out.push(next / 1000);
  }
}

/** "1 h 4 min", "30 s", "23 h 59 min 50 s": a planned offset as the docs write it. */
export function formatOffset(seconds: number): string {
  const s = Math.round(seconds);
  if (s === 0) return "0";
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = s % 60;
  if (h === 0 && m > 0 && rest === 30) return `${m}.5 min`;
  return [h ? `${h} h` : "", m ? `${m} min` : "", rest ? `${rest} s` : ""].filter(Boolean).join(" ");
}

/** The published retry schedule: a Markdown table of every planned attempt (before jitter) of `p`. */
export function scheduleTable(p: RetryPolicy): string {
  const offsets = plannedOffsetsSeconds(p);
  const rows = offsets.map((o, i) => `| ${i + 1} | ${formatOffset(o)} |`);
  return ["| attempt | starts after the event (±20 % jitter on each wait) |", "|---|---|", ...rows].join("\n");
}
