import { describe, expect, it } from "@jest/globals";
import {
  appliedThroughEnd,
  END_READ_IDLE_AFTER_MS,
  END_READ_WAIT_MS,
  PositionReporter,
  TopicEndWatch,
  type NextOffsets,
} from "../src/partner-event-feed.js";
import { createLogger } from "../src/logger.js";

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
    reporter.advance(0, 5n);
    reporter.advance(0, 6n);
    reporter.advance(0, 7n);
    expect(s.sent).toEqual([{ nextOffsets: { 0: 5n }, leaving: false }]);
    s.release();
    await new Promise((r) => setImmediate(r));
    expect(s.sent.slice(1)).toEqual([{ nextOffsets: { 0: 7n }, leaving: false }]);
    s.release();
    await reporter.flush();
    s.failing(true);
    await reporter.stop();
    expect(s.sent.at(-1)).toEqual({ nextOffsets: {}, leaving: true });
  });

  it("knows how old the last stored report is; a failed report does not count", async () => {
    const s = recordingSend();
    const reporter = new PositionReporter(s.send, logger, 60_000);
    expect(reporter.sinceLastReportMs()).toBe(Infinity);
    s.failing(true);
    reporter.advance(0, 1n);
    await reporter.flush();
    expect(reporter.sinceLastReportMs()).toBe(Infinity);
    s.failing(false);
    const before = performance.now();
    reporter.advance(0, 2n);
    s.release();
    await reporter.flush();
    expect(reporter.sinceLastReportMs()).toBeLessThanOrEqual(performance.now() - before);
    s.failing(true);
    await reporter.stop();
  });
});

describe("appliedThroughEnd: cache trust by position, not by heartbeat", () => {
  const end = (offsets: [number, bigint][], readAt = 1_000) => ({ ends: new Map(offsets), readAt });
  const applied = (offsets: [number, bigint][]) => new Map(offsets);

  it("trusts a follower that applied everything up to the end last read", () => {
    expect(appliedThroughEnd(applied([[0, 7n]]), end([[0, 7n]]), 1_100, 1_500)).toBe(true);
    expect(appliedThroughEnd(applied([[0, 9n]]), end([[0, 7n]]), 1_100, 1_500)).toBe(true);
  });

  it("does not trust a follower behind the end on any partition, however recently it reported", () => {
    expect(appliedThroughEnd(applied([[0, 6n]]), end([[0, 7n]]), 1_100, 1_500)).toBe(false);
    expect(
      appliedThroughEnd(
        applied([[0, 7n]]),
        end([
          [0, 7n],
          [1, 1n],
        ]),
        1_100,
        1_500,
      ),
    ).toBe(false);
  });

  it("does not trust when the end is not known or was last read too long ago (Kafka unreachable)", () => {
    expect(appliedThroughEnd(applied([[0, 7n]]), undefined, 1_100, 1_500)).toBe(false);
    expect(appliedThroughEnd(applied([[0, 7n]]), end([[0, 7n]]), 2_501, 1_500)).toBe(false);
  });
});

describe("TopicEndWatch: the end read on demand", () => {
  /** A watch on an injected clock whose reads are counted and answer `topicEnd` as it stands. */
  function watchOn(everyMs = 500) {
    const clock = { now: 0 };
    let topicEnd: [number, bigint][] = [[0, 3n]];
    let reads = 0;
    const watch = new TopicEndWatch(
      { ends: new Map(topicEnd), readAt: 0 },
      async () => {
        reads++;
        return new Map(topicEnd);
      },
      everyMs,
      () => clock.now,
    );
    return { watch, clock, reads: () => reads, write: (end: [number, bigint][]) => (topicEnd = end) };
  }
  const applied = (offsets: [number, bigint][]) => new Map(offsets);

  it("an idle replica reads nothing: a round reads only while the end was asked about within END_READ_IDLE_AFTER_MS", async () => {
    const w = watchOn();
    w.watch.trusts(applied([[0, 3n]]));
    w.clock.now = END_READ_IDLE_AFTER_MS;
    await w.watch.round();
    expect(w.reads()).toBe(1);
    w.clock.now = 2 * END_READ_IDLE_AFTER_MS + 1;
    await w.watch.round();
    await w.watch.round();
    expect(w.reads()).toBe(1);
  });

  it("an end too old to trust is read again before the answer, and then trusted; a fresh one is not read", async () => {
    const w = watchOn(500);
    w.clock.now = 1_400;
    await w.watch.readIfStale();
    expect(w.reads()).toBe(0);
    expect(w.watch.trusts(applied([[0, 3n]]))).toBe(true);
    w.clock.now = 60_000;
    expect(w.watch.trusts(applied([[0, 3n]]))).toBe(false);
    await w.watch.readIfStale();
    expect(w.reads()).toBe(1);
    expect(w.watch.trusts(applied([[0, 3n]]))).toBe(true);
  });

  it("a follower behind the end read on demand is not trusted (its consumer stuck while the replica was idle)", async () => {
    const w = watchOn(500);
    w.write([[0, 4n]]);
    w.clock.now = 60_000;
    await w.watch.readIfStale();
    expect(w.watch.trusts(applied([[0, 3n]]))).toBe(false);
    expect(w.watch.trusts(applied([[0, 4n]]))).toBe(true);
  });

  it("while reads fail (Kafka unreachable) a request does not wait for one, and the end is trusted again once a read succeeds", async () => {
    const clock = { now: 0 };
    let reachable = false;
    let reads = 0;
    let release: () => void = () => undefined;
    const readEnd = () => {
      reads++;
      if (!reachable) return Promise.reject(new Error("Kafka unreachable"));
      return new Promise<Map<number, bigint>>((resolve) => (release = () => resolve(new Map([[0, 3n]]))));
    };
    const watch = new TopicEndWatch({ ends: new Map([[0, 3n]]), readAt: 0 }, readEnd, 500, () => clock.now);
    clock.now = 60_000;
    await watch.readIfStale(); // the first failure: waited for, and learnt
    expect(reads).toBe(1);
    reachable = true;
    let answered = false;
    const asked = watch.readIfStale().then(() => (answered = true));
    await new Promise((r) => setImmediate(r));
    expect(answered).toBe(true); // not waiting on the read it started
    expect(reads).toBe(2);
    expect(watch.trusts(new Map([[0, 3n]]))).toBe(false);
    release();
    await asked;
    await new Promise((r) => setImmediate(r));
    expect(watch.trusts(new Map([[0, 3n]]))).toBe(true);
  });

  it("a read under way for longer than END_READ_WAIT_MS (Kafka not answering) is not waited for again", async () => {
    const clock = { now: 0 };
    const watch = new TopicEndWatch(
      { ends: new Map([[0, 3n]]), readAt: 0 },
      () => new Promise(() => undefined),
      500,
      () => clock.now,
    );
    clock.now = 60_000;
    await watch.readIfStale();
    clock.now += END_READ_WAIT_MS + 1;
    let answered = false;
    void watch.readIfStale().then(() => (answered = true));
    await new Promise((r) => setImmediate(r));
    expect(answered).toBe(true);
    expect(watch.trusts(new Map([[0, 3n]]))).toBe(false);
  });

  it("waits END_READ_WAIT_MS at most for a read that does not come back, and then does not trust", async () => {
    const clock = { now: 0 };
    const watch = new TopicEndWatch(
      { ends: new Map([[0, 3n]]), readAt: 0 },
      () => new Promise(() => undefined),
      500,
      () => clock.now,
    );
    clock.now = 60_000;
    const started = performance.now();
    await watch.readIfStale();
    expect(performance.now() - started).toBeGreaterThanOrEqual(END_READ_WAIT_MS - 5);
    expect(watch.trusts(new Map([[0, 3n]]))).toBe(false);
  });
});
