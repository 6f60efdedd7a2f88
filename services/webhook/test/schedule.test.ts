import { describe, expect, it } from "@jest/globals";
import {
  JITTER,
  latestStartOffsetMs,
  maxDelaySeconds,
  nextAttemptAt,
  retryDelayMs,
  type RetryPolicy,
} from "../src/schedule.js";
import { plannedOffsetsSeconds } from "./planned-schedule.js";

const production: RetryPolicy = { baseSeconds: 30, windowSeconds: 86_400, attemptTimeoutSeconds: 10 };
const fast: RetryPolicy = { baseSeconds: 0.2, windowSeconds: 20, attemptTimeoutSeconds: 2 };

/** Plays a whole schedule against an endpoint that always fails after `durationMs`. */
function simulate(p: RetryPolicy, random: () => number, durationMs: number): number[] {
  const starts = [0];
  for (;;) {
    const ended = starts[starts.length - 1]! + durationMs;
    const next = nextAttemptAt({ createdAt: 0, attemptsMade: starts.length, lastEndedAt: ended }, p, random());
    if (next === null) return starts;
    starts.push(next);
  }
}

describe("webhook retry schedule", () => {
  it("the first retry waits WEBHOOK_RETRY_BASE_SECONDS, give or take the jitter", () => {
    expect(retryDelayMs(1, production, 0.5)).toBe(30_000);
    expect(retryDelayMs(1, production, 0)).toBe(30_000 * (1 - JITTER));
    expect(retryDelayMs(1, production, 0.999999)).toBeCloseTo(30_000 * (1 + JITTER), -1);
  });

  it("later delays grow exponentially until the ceiling of an eighth of the window", () => {
    const delays = [1, 2, 3, 4, 5].map((n) => retryDelayMs(n, production, 0.5));
    expect(delays).toEqual([30_000, 60_000, 120_000, 240_000, 480_000]);
    expect(maxDelaySeconds(production)).toBe(10_800);
    expect(retryDelayMs(12, production, 0.5)).toBe(10_800_000);
    expect(retryDelayMs(1000, production, 0.5)).toBe(10_800_000);
  });

  it("jitter stays within ±20% for every draw", () => {
    for (let i = 0; i <= 100; i++) {
      const d = retryDelayMs(3, production, i / 101);
      expect(d).toBeGreaterThanOrEqual(120_000 * 0.8);
      expect(d).toBeLessThanOrEqual(120_000 * 1.2);
    }
  });

  it("all attempts end within WEBHOOK_RETRY_WINDOW_SECONDS, whatever the jitter and however long each attempt takes", () => {
    for (const p of [production, fast, { baseSeconds: 1, windowSeconds: 3600, attemptTimeoutSeconds: 10 }]) {
      for (const random of [() => 0, () => 0.999999, Math.random]) {
        for (const duration of [0, 50, p.attemptTimeoutSeconds * 1000]) {
          const starts = simulate(p, random, duration);
          expect(starts.length).toBeGreaterThan(3);
          for (const s of starts)
            expect(s + p.attemptTimeoutSeconds * 1000).toBeLessThanOrEqual(p.windowSeconds * 1000);
          // Retries go on until an attempt ends at or past the last possible start: the whole window is used.
          expect(starts[starts.length - 1]! + duration).toBeGreaterThanOrEqual(latestStartOffsetMs(p));
          for (let i = 1; i < starts.length; i++) expect(starts[i]!).toBeGreaterThan(starts[i - 1]!);
        }
      }
    }
  });

  it("the production schedule is a handful of attempts spread over 24 hours", () => {
    const offsets = plannedOffsetsSeconds(production);
    expect(offsets.slice(0, 4)).toEqual([0, 30, 90, 210]);
    expect(offsets[offsets.length - 1]).toBe(86_390);
    expect(offsets.length).toBeGreaterThanOrEqual(12);
    expect(offsets.length).toBeLessThanOrEqual(20);
  });

  it("after an attempt that ended at or past the last start, the event fails", () => {
    const last = latestStartOffsetMs(production);
    expect(nextAttemptAt({ createdAt: 0, attemptsMade: 14, lastEndedAt: last }, production, 0.5)).toBeNull();
    expect(nextAttemptAt({ createdAt: 0, attemptsMade: 14, lastEndedAt: last + 1 }, production, 0.5)).toBeNull();
    expect(nextAttemptAt({ createdAt: 0, attemptsMade: 14, lastEndedAt: last - 1 }, production, 0.5)).toBe(last);
  });

  it("the schedule counts from when the event was created, not from the epoch", () => {
    const created = Date.UTC(2030, 0, 1);
    expect(nextAttemptAt({ createdAt: created, attemptsMade: 1, lastEndedAt: created + 100 }, production, 0.5)).toBe(
      created + 100 + 30_000,
    );
    expect(
      nextAttemptAt({ createdAt: created, attemptsMade: 1, lastEndedAt: created + 86_400_000 }, production, 0.5),
    ).toBeNull();
  });

  it("a window shorter than two attempt timeouts still allows retries in its first half", () => {
    const tiny: RetryPolicy = { baseSeconds: 0.5, windowSeconds: 4, attemptTimeoutSeconds: 10 };
    expect(latestStartOffsetMs(tiny)).toBe(2000);
    expect(simulate(tiny, () => 0.5, 0).length).toBeGreaterThan(1);
  });
});
