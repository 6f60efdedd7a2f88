import { describe, expect, it } from "@jest/globals";
import { PositionReporter, type NextOffsets } from "../src/events/partner-event-feed.js";
import { createLogger } from "../src/runtime/logger.js";

// The position a follower of the partner-events topic reports: at once when it moves, coalesced
// while a report is in flight, and how fresh the stored position is known to be.

const logger = createLogger("test", "silent");

function recordingSend() {
  const sent: { nextOffsets: NextOffsets; leaving: boolean }[] = [];
  let release: (() => void) | undefined;
  let fail = false;
  const send = (nextOffsets: NextOffsets, leaving: boolean) => {
    sent.push({ nextOffsets, leaving });
    if (fail) return Promise.reject(new Error("store unreachable"));
    return new Promise<void>((resolve) => {
      release = resolve;
    });
  };
  return { sent, send, release: () => release?.(), failing: (f: boolean) => (fail = f) };
}

describe("PositionReporter", () => {
  it("reports a move at once, and coalesces the moves made while a report is in flight into one report of the latest", async () => {
    const s = recordingSend();
    const reporter = new PositionReporter(s.send, logger, 60_000);
    void reporter.advance(0, 5n);
    void reporter.advance(0, 6n);
    const reported = reporter.advance(0, 7n);
    expect(s.sent).toEqual([{ nextOffsets: { 0: 5n }, leaving: false }]);
    s.release();
    await new Promise((r) => setImmediate(r));
    expect(s.sent.slice(1)).toEqual([{ nextOffsets: { 0: 7n }, leaving: false }]);
    s.release();
    await reported;
    expect(s.sent).toHaveLength(2);
    s.failing(true);
    await reporter.stop();
    expect(s.sent.at(-1)).toEqual({ nextOffsets: {}, leaving: true });
  });

  it("knows how old the last stored report is; a failed report does not count", async () => {
    const s = recordingSend();
    const reporter = new PositionReporter(s.send, logger, 60_000);
    expect(reporter.sinceLastReportMs()).toBe(Infinity);
    s.failing(true);
    await reporter.advance(0, 1n);
    expect(reporter.sinceLastReportMs()).toBe(Infinity);
    s.failing(false);
    const before = performance.now();
    const reported = reporter.advance(0, 2n);
    s.release();
    await reported;
    expect(reporter.sinceLastReportMs()).toBeLessThanOrEqual(performance.now() - before);
    s.failing(true);
    await reporter.stop();
  });
});
