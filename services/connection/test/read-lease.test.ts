import { describe, expect, it } from "@jest/globals";
import { fenceUntil, grantableLeaseMs, leaseWaitMs } from "../src/read-lease.js";
import type { ConnectionState, Timing } from "../src/state-machine.js";

const now = new Date("2026-11-27T12:00:00Z");
const t: Timing = { now, pendingTtlSeconds: 30 * 86_400, sandboxDelaySeconds: 30 };
const rules = { leaseMs: 1000, marginMs: 250 };
const state = (over: Partial<ConnectionState>): ConnectionState => ({ status: "approved", mode: "live", resolved: true, pendingSince: now, approveAt: null, ...over });

describe("read leases (a change of a connection waits for every lease on it)", () => {
  it("grants the whole lease on an approved, revoked or expired status: only a stored change ends them", () => {
    for (const status of ["approved", "revoked", "expired"] as const) expect(grantableLeaseMs(state({ status }), t, rules)).toBe(1000);
  });

  it("cuts a pending or declined lease short of the window's end, where time alone turns it expired", () => {
    const endsIn = (ms: number) => new Date(now.getTime() - t.pendingTtlSeconds * 1000 + ms);
    expect(grantableLeaseMs(state({ status: "pending", pendingSince: endsIn(600) }), t, rules)).toBe(350);
    expect(grantableLeaseMs(state({ status: "declined", pendingSince: endsIn(200) }), t, rules)).toBe(0);
    expect(grantableLeaseMs(state({ status: "pending", pendingSince: endsIn(-1) }), t, rules)).toBe(1000); // already expired: final
    expect(grantableLeaseMs(state({ status: "pending", pendingSince: now }), t, rules)).toBe(1000);
  });

  it("a sandbox connection awaiting its approval is changed by a stored write, so it takes the whole lease", () => {
    const sandbox = state({ status: "pending", mode: "test", approveAt: new Date(now.getTime() + 100), pendingSince: new Date(now.getTime() - t.pendingTtlSeconds * 1000 + 10) });
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

  it("a writer's fence outlasts its wait, so no lease is granted while it waits", () => {
    expect(fenceUntil(now, rules).getTime() - now.getTime()).toBeGreaterThan(rules.leaseMs + rules.marginMs);
  });
});
