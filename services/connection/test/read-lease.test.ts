import { describe, expect, it } from "@jest/globals";
import {
  fenceUntil,
  grantableLeaseMs,
  leaseWaitMs,
  partnerSeesNoChange,
  statusesReadAlike,
} from "../src/read-lease.js";
import type { ConnectionState, Timing } from "../src/state-machine.js";

const now = new Date("2026-11-27T12:00:00Z");
const t: Timing = { now, pendingTtlSeconds: 30 * 86_400, sandboxDelaySeconds: 30 };
const rules = { leaseMs: 1000, marginMs: 250 };
const state = (over: Partial<ConnectionState>): ConnectionState => ({
  status: "approved",
  mode: "live",
  resolved: true,
  pendingSince: now,
  approveAt: null,
  ...over,
});

describe("read leases (a change of a connection waits for every lease on it)", () => {
  it("grants the whole lease on an approved, revoked or expired status: only a stored change ends them", () => {
    for (const status of ["approved", "revoked", "expired"] as const)
      expect(grantableLeaseMs(state({ status }), t, rules)).toBe(1000);
  });

  it("cuts a pending or declined lease short of the window's end, where time alone turns it expired", () => {
    const endsIn = (ms: number) => new Date(now.getTime() - t.pendingTtlSeconds * 1000 + ms);
    expect(grantableLeaseMs(state({ status: "pending", pendingSince: endsIn(600) }), t, rules)).toBe(350);
    expect(grantableLeaseMs(state({ status: "declined", pendingSince: endsIn(200) }), t, rules)).toBe(0);
    expect(grantableLeaseMs(state({ status: "pending", pendingSince: endsIn(-1) }), t, rules)).toBe(1000); // already expired: final
    expect(grantableLeaseMs(state({ status: "pending", pendingSince: now }), t, rules)).toBe(1000);
  });

  it("a sandbox connection awaiting its approval is changed by a stored write, so it takes the whole lease", () => {
    const sandbox = state({
      status: "pending",
      mode: "test",
      approveAt: new Date(now.getTime() + 100),
      pendingSince: new Date(now.getTime() - t.pendingTtlSeconds * 1000 + 10),
    });
    expect(grantableLeaseMs(sandbox, t, rules)).toBe(1000);
  });

  it("grants nothing when leases are off", () => {
    expect(grantableLeaseMs(state({}), t, { ...rules, leaseMs: 0 })).toBe(0);
  });

  it("a writer waits until the last lease's end plus the margin; none when there was none or it ended long ago", () => {
    expect(leaseWaitMs(new Date(now.getTime() + 400), now, rules)).toBe(650);
    expect(leaseWaitMs(new Date(now.getTime() - 100), now, rules)).toBe(150);
    expect(leaseWaitMs(new Date(now.getTime() - 300), now, rules)).toBe(0);
    expect(leaseWaitMs(null, now, rules)).toBe(0);
    expect(leaseWaitMs(undefined, now, rules)).toBe(0);
  });

  it("a writer's fence outlasts its wait, so no lease is granted while it waits; a dead writer's runs out within 2.25 s", () => {
    expect(fenceUntil(now, rules).getTime() - now.getTime()).toBeGreaterThan(rules.leaseMs + rules.marginMs);
    expect(fenceUntil(now, rules).getTime() - now.getTime()).toBeLessThanOrEqual(2_250);
  });

  it("a decline, and the sweep storing an expiry a partner already reads, change nothing a partner sees: no wait for leases (guarantee 4)", () => {
    const pending = state({ status: "pending" });
    expect(partnerSeesNoChange(pending, { ...pending, status: "declined" }, t)).toBe(true);
    const ended = state({ status: "pending", pendingSince: new Date(now.getTime() - t.pendingTtlSeconds * 1000 - 1) });
    expect(partnerSeesNoChange(ended, { ...ended, status: "expired" }, t)).toBe(true);
    expect(
      partnerSeesNoChange(state({ status: "declined" }), { ...state({ status: "declined" }), status: "expired" }, t),
    ).toBe(false); // not ended yet: it would read expired early
  });

  it("every change a partner sees waits: approve, sever, delete, a reopening, the sandbox approval", () => {
    const pending = state({ status: "pending" });
    expect(partnerSeesNoChange(pending, { ...pending, status: "approved" }, t)).toBe(false);
    expect(partnerSeesNoChange(state({ status: "declined" }), state({ status: "approved" }), t)).toBe(false);
    expect(partnerSeesNoChange(state({ status: "approved" }), state({ status: "revoked" }), t)).toBe(false);
    expect(partnerSeesNoChange(pending, { ...pending, status: "revoked" }, t)).toBe(false);
    const revoked = state({ status: "revoked", pendingSince: new Date(now.getTime() - 86_400_000) });
    expect(partnerSeesNoChange(revoked, { ...revoked, status: "pending", pendingSince: now }, t)).toBe(false);
    const sandbox = state({ status: "pending", mode: "test", approveAt: now });
    expect(partnerSeesNoChange(sandbox, { ...sandbox, status: "approved", approveAt: null }, t)).toBe(false);
    // The same status in a new window ends at another time.
    expect(partnerSeesNoChange(pending, { ...pending, pendingSince: new Date(now.getTime() + 1) }, t)).toBe(false);
  });

  it("a lease holds while the stored status reads alike: pending and declined together, every other status alone", () => {
    expect(statusesReadAlike("pending")).toEqual(["pending", "declined"]);
    expect(statusesReadAlike("declined")).toEqual(["pending", "declined"]);
    for (const status of ["approved", "expired", "revoked"] as const)
      expect(statusesReadAlike(status)).toEqual([status]);
  });
});
