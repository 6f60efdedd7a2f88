import { describe, expect, it } from "@jest/globals";
import {
  afterAttempt,
  failedAt,
  noEndpoint,
  recoverable,
  requeue,
  stored,
  type Attempt,
  type DeliveryState,
} from "../src/delivery-states.js";
import { latestStartOffsetMs, type RetryPolicy } from "../src/schedule.js";

// The webhook delivery state machine, state by state, like the connection state machine's table.

const policy: RetryPolicy = { baseSeconds: 30, windowSeconds: 86400, attemptTimeoutSeconds: 10 };
const start = new Date("2030-01-01T00:00:00Z");
const at = (s: number) => new Date(start.getTime() + s * 1000);
const attempt = (o: Partial<Attempt> = {}): Attempt => ({
  delivered: false,
  statusCode: 500,
  windowStart: start,
  attemptsMade: 1,
  endedAt: at(1),
  cutOff: false,
  ...o,
});

describe("a new event", () => {
  it("is pending, due at once, nothing attempted", () => {
    expect(stored(start)).toEqual({ state: "pending", attempts: 0, attemptLog: [], nextAttemptAt: start });
  });
});

describe("no webhook address when the event comes due", () => {
  it("before any attempt: kept as no_endpoint, never sent, nothing scheduled", () => {
    expect(noEndpoint(0)).toEqual({ state: "no_endpoint", nextAttemptAt: null });
  });

  it("after attempts were made (the address was removed since): no step of its own, the attempt counts as failed", () => {
    expect(noEndpoint(1)).toBeNull();
    expect(noEndpoint(7)).toBeNull();
  });
});

describe("after an attempt", () => {
  it("a 2xx delivers: nothing scheduled, delivered when the attempt ended, counted as delivered", () => {
    expect(afterAttempt(attempt({ delivered: true, statusCode: 200, endedAt: at(2) }), policy, 0.5)).toEqual({
      counted: true,
      outcome: "delivered",
      state: "delivered",
      nextAttemptAt: null,
      deliveredAt: at(2),
    });
  });

  it.each([
    ["a 500", 500],
    ["a 404", 404],
    ["no answer (timeout, refused)", 0],
  ])("%s with window left stays pending, due after the backoff, counted as retry", (_, statusCode) => {
    const step = afterAttempt(attempt({ statusCode }), policy, 0.5);
    expect(step).toEqual({ counted: true, outcome: "retry", state: "pending", nextAttemptAt: at(1 + 30) });
  });

  it("retry n waits base * 2^(n-1) after the attempt ended (no jitter at random 0.5)", () => {
    for (const [made, waitS] of [
      [1, 30],
      [2, 60],
      [3, 120],
      [5, 480],
    ] as const) {
      const step = afterAttempt(attempt({ attemptsMade: made, endedAt: at(1000) }), policy, 0.5);
      expect(step).toMatchObject({ state: "pending", nextAttemptAt: at(1000 + waitS) });
    }
  });

  it("a failure after the window's last start fails the delivery: nothing scheduled, counted as failed", () => {
    const last = latestStartOffsetMs(policy) / 1000;
    expect(afterAttempt(attempt({ endedAt: at(last) }), policy, 0.5)).toEqual({
      counted: true,
      outcome: "failed",
      state: "failed",
      nextAttemptAt: null,
    });
    expect(afterAttempt(attempt({ endedAt: at(last - 1) }), policy, 0.5)).toMatchObject({
      state: "pending",
      nextAttemptAt: at(last),
    });
  });

  it("the window counts from its start (a re-queue restarts it), not from the first attempt", () => {
    const last = latestStartOffsetMs(policy) / 1000;
    const requeuedAt = at(last);
    expect(
      afterAttempt(attempt({ windowStart: requeuedAt, attemptsMade: 9, endedAt: at(last + 1) }), policy, 0.5),
    ).toMatchObject({ state: "pending" });
  });

  it.each([429, 503])("a %s's Retry-After holds the next attempt back", (statusCode) => {
    const step = afterAttempt(attempt({ statusCode, retryAfter: "600" }), policy, 0.5);
    expect(step).toMatchObject({ outcome: "retry", nextAttemptAt: at(1 + 600) });
  });

  it("a Retry-After on other statuses is ignored", () => {
    expect(afterAttempt(attempt({ statusCode: 500, retryAfter: "600" }), policy, 0.5)).toMatchObject({
      nextAttemptAt: at(31),
    });
  });

  it("a Retry-After past the window's last start fails the delivery", () => {
    expect(
      afterAttempt(attempt({ statusCode: 503, retryAfter: String(policy.windowSeconds) }), policy, 0.5),
    ).toMatchObject({ outcome: "failed", state: "failed" });
  });

  it("an attempt a stopping replica cut off before any answer is not counted: due again at once", () => {
    expect(afterAttempt(attempt({ statusCode: 0, cutOff: true, endedAt: at(5) }), policy, 0.5)).toEqual({
      counted: false,
      dueAt: at(5),
    });
  });

  it("a stopping replica still counts an attempt that got an answer", () => {
    expect(afterAttempt(attempt({ statusCode: 500, cutOff: true }), policy, 0.5)).toMatchObject({
      counted: true,
      outcome: "retry",
    });
    expect(afterAttempt(attempt({ delivered: true, statusCode: 204, cutOff: true }), policy, 0.5)).toMatchObject({
      counted: true,
      outcome: "delivered",
    });
  });
});

describe("the operator's resend and recover", () => {
  it("resend and recover put the event back to pending, due at once", () => {
    expect(requeue(at(9))).toEqual({ state: "pending", nextAttemptAt: at(9) });
  });

  const ev = (state: DeliveryState, lastAttemptS?: number) => ({
    state,
    createdAt: start,
    attemptLog: lastAttemptS === undefined ? [] : [{ startedAt: at(lastAttemptS) }],
  });

  it.each([
    ["failed", 100, 100, true],
    ["failed", 99, 100, false],
    ["no_endpoint", undefined, 0, true],
    ["no_endpoint", undefined, 1, false],
    ["delivered", 200, 100, false],
    ["pending", 200, 100, false],
  ] as const)("recover takes %s (last failure at %s s) since %s s: %s", (state, last, sinceS, expected) => {
    expect(recoverable([ev(state, last)], at(sinceS)).length === 1).toBe(expected);
  });

  it("a delivery failed at its last attempt's start, or (never attempted) at its creation", () => {
    expect(failedAt(ev("failed", 42))).toEqual(at(42));
    expect(failedAt(ev("no_endpoint"))).toEqual(start);
  });
});
