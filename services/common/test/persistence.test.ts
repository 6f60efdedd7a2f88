import { describe, expect, it } from "@jest/globals";
import { context, propagation, trace, ROOT_CONTEXT } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { emptyOutbox, isDuplicateKey, outboxEntry } from "../src/store/persistence.js";
import { leaseFree } from "../src/background/lease.js";

// The pure parts of the persistence module (services/common/src/store/persistence.ts).

describe("isDuplicateKey", () => {
  it("is true for E11000 only", () => {
    expect(isDuplicateKey(Object.assign(new Error("E11000 duplicate key"), { code: 11000 }))).toBe(true);
    expect(isDuplicateKey(Object.assign(new Error("write conflict"), { code: 112 }))).toBe(false);
    expect(isDuplicateKey(new Error("E11000 in the message only"))).toBe(false);
    expect(isDuplicateKey(null)).toBe(false);
    expect(isDuplicateKey("E11000")).toBe(false);
  });
});

describe("leaseFree", () => {
  it("matches a lease never taken, given back, or run out at the given time, under the named field", () => {
    const now = new Date(1_000);
    expect(leaseFree({ until: "leaseUntil", holder: "leaseToken" }, now)).toEqual({
      $or: [{ leaseUntil: null }, { leaseUntil: { $lte: now } }],
    });
    expect(leaseFree({ until: "relayUntil", holder: "relayHolder" }, now)).toEqual({
      $or: [{ relayUntil: null }, { relayUntil: { $lte: now } }],
    });
  });
});

describe("outbox entries", () => {
  it("carry a fresh event id, the time given, and the caller's fields", () => {
    const at = new Date(42);
    const first = outboxEntry({ type: "x.happened", status: "on" }, at);
    const second = outboxEntry({ type: "x.happened", status: "on" }, at);
    expect(first).toMatchObject({
      type: "x.happened",
      status: "on",
      occurredAt: at,
      eventId: expect.stringMatching(/^evt_/),
    });
    expect(second.eventId).not.toBe(first.eventId);
  });

  it("keep the trace context active when the state change was written, and none without one", () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    try {
      expect(outboxEntry({}).trace).toBeUndefined();
      const spanContext = { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: 1 };
      const entry = context.with(trace.setSpanContext(ROOT_CONTEXT, spanContext), () => outboxEntry({}));
      expect(entry.trace).toEqual({ traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
    } finally {
      propagation.disable();
      context.disable();
    }
  });

  it("a new document starts with none and no relay", () => {
    expect(emptyOutbox()).toEqual({ outbox: [], relayUntil: null, relayHolder: null });
  });
});
