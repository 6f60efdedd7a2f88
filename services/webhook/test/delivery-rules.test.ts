import { describe, expect, it } from "@jest/globals";
import { afterAttempt, failingAfterMs, isFailing, type EndpointHealthDoc } from "../src/endpoint-health.js";
import { failedAt, recoverable } from "../src/delivery-states.js";
import { latestStartOffsetMs, nextAttemptAt, retryAfterUntil, type RetryPolicy } from "../src/schedule.js";
import { signatureHeader } from "../src/signature.js";
import { signingSecrets } from "../src/targets.js";
import type { WebhookEventDoc } from "../src/store.js";

// The pure rules behind Retry-After, rotation signatures, recover and endpoint health.

const policy: RetryPolicy = { baseSeconds: 30, windowSeconds: 86400, attemptTimeoutSeconds: 10 };

describe("Retry-After", () => {
  it("delay seconds and HTTP dates are read; anything else is ignored", () => {
    const now = Date.parse("2026-03-01T12:00:00Z");
    expect(retryAfterUntil("7", now)).toBe(now + 7000);
    expect(retryAfterUntil(" 120 ", now)).toBe(now + 120_000);
    expect(retryAfterUntil("Sun, 01 Mar 2026 12:01:00 GMT", now)).toBe(now + 60_000);
    expect(retryAfterUntil("Sun, 01 Mar 2026 11:00:00 GMT", now)).toBe(now); // a past date: no extra wait
    for (const bad of [undefined, "", "-5", "1.5", "soon", "1 March"])
      expect(retryAfterUntil(bad, now)).toBeUndefined();
  });

  it("a receiver's Retry-After of 7 s puts the next attempt no sooner than 7 s after the attempt ended, whatever the jitter", () => {
    const ended = 1_000_000;
    for (const random of [0, 0.5, 0.999]) {
      const due = nextAttemptAt(
        { createdAt: ended - 1000, attemptsMade: 1, lastEndedAt: ended, notBefore: ended + 7000 },
        policy,
        random,
      )!;
      expect(due).toBeGreaterThanOrEqual(ended + 7000);
    }
  });

  it("a Retry-After shorter than the backoff changes nothing", () => {
    const ev = { createdAt: 0, attemptsMade: 3, lastEndedAt: 10_000 };
    expect(nextAttemptAt({ ...ev, notBefore: 10_001 }, policy, 0.5)).toBe(nextAttemptAt(ev, policy, 0.5));
  });

  it("a Retry-After beyond the window's last start ends the delivery (no attempt early, none outside the window)", () => {
    const latest = latestStartOffsetMs(policy);
    expect(
      nextAttemptAt({ createdAt: 0, attemptsMade: 1, lastEndedAt: 1000, notBefore: latest + 1 }, policy, 0.5),
    ).toBeNull();
    expect(nextAttemptAt({ createdAt: 0, attemptsMade: 1, lastEndedAt: 1000, notBefore: latest }, policy, 0.5)).toBe(
      latest,
    );
  });
});

describe("signatures during a rotation", () => {
  it("one v1 per secret, the current first, in one header", () => {
    const header = signatureHeader(["new", "old"], 1_700_000_000, "{}");
    expect(header).toBe(
      `t=1700000000,v1=${signatureHeader(["new"], 1_700_000_000, "{}").split("v1=")[1]},v1=${signatureHeader(["old"], 1_700_000_000, "{}").split("v1=")[1]}`,
    );
  });

  it("a replaced secret signs until its overlap ends, then no more", () => {
    const target = {
      url: "https://x",
      secret: "new",
      previous: [
        { secret: "old", expiresAt: 5000 },
        { secret: "older", expiresAt: 1000 },
      ],
    };
    expect(signingSecrets(target, 999)).toEqual(["new", "old", "older"]);
    expect(signingSecrets(target, 1000)).toEqual(["new", "old"]);
    expect(signingSecrets(target, 5000)).toEqual(["new"]);
  });
});

describe("recover", () => {
  const event = (state: WebhookEventDoc["state"], createdAt: number, lastAttempt?: number) =>
    ({
      _id: `evt_${state}${createdAt}`,
      state,
      createdAt: new Date(createdAt),
      attemptLog:
        lastAttempt === undefined
          ? []
          : [{ number: 1, startedAt: new Date(lastAttempt), statusCode: 500, durationMs: 1, responseExcerpt: "" }],
    }) as unknown as WebhookEventDoc;

  it("takes failed and never-sendable deliveries whose last failure is at or after the time, nothing else", () => {
    const events = [
      event("failed", 0, 100),
      event("failed", 0, 50),
      event("delivered", 0, 200),
      event("pending", 0, 200),
      event("no_endpoint", 150),
      event("no_endpoint", 10),
    ];
    expect(recoverable(events, new Date(100)).map((e) => e._id)).toEqual(["evt_failed0", "evt_no_endpoint150"]);
    expect(failedAt(events[0]!).getTime()).toBe(100);
  });
});

describe("endpoint health", () => {
  const period = failingAfterMs(86400);
  it("the failing period is a twenty-fourth of the retry window: 1 h by default", () => {
    expect(period).toBe(3_600_000);
  });

  it("failing once every attempt failed for the period; one alert per streak; a delivery clears it", () => {
    const t = (ms: number) => new Date(ms);
    let doc: EndpointHealthDoc | null = null;
    const step = (delivered: boolean, at: number) => {
      const r = afterAttempt(doc, "ptr_1", delivered, t(at), period);
      doc = r.next;
      return r.transition;
    };
    expect(step(false, 0)).toBeUndefined();
    expect(isFailing(doc, period - 1, period)).toBe(false);
    expect(step(false, period - 1)).toBeUndefined();
    expect(step(false, period)).toBe("failing");
    expect(isFailing(doc, period, period)).toBe(true);
    expect(step(false, period * 2)).toBeUndefined(); // alerted once for the streak
    expect(step(true, period * 2 + 1)).toBe("recovered");
    expect(isFailing(doc, period * 3, period)).toBe(false);
    expect(doc!.lastSuccessAt).toEqual(t(period * 2 + 1));
    expect(step(true, period * 3)).toBeUndefined();
  });

  it("a success between failures restarts the streak", () => {
    let doc = afterAttempt(null, "p", false, new Date(0), period).next;
    doc = afterAttempt(doc, "p", true, new Date(10), period).next;
    doc = afterAttempt(doc, "p", false, new Date(period), period).next;
    expect(isFailing(doc, period + 10, period)).toBe(false);
    expect(doc.failingSince).toEqual(new Date(period));
  });
});

describe("the published retry schedule", () => {
  it("docs/partners.md shows the table derived from the default settings (WEBHOOK_RETRY_BASE_SECONDS 30, window 24 h, timeout 10 s)", async () => {
    const { readFileSync } = await import("node:fs");
    const { scheduleTable, plannedOffsetsSeconds } = await import("./planned-schedule.js");
    const table = scheduleTable(policy);
    expect(readFileSync("docs/partners.md", "utf8")).toContain(table);
    expect(table.split("\n")).toHaveLength(2 + plannedOffsetsSeconds(policy).length);
    // The last attempt starts early enough to end within the window.
    expect(plannedOffsetsSeconds(policy).at(-1)! + policy.attemptTimeoutSeconds).toBeLessThanOrEqual(
      policy.windowSeconds,
    );
  });
});
