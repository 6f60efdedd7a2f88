import { awaitingSandboxApproval, effectiveStatus, type ConnectionState, type Timing } from "./state-machine.js";

// Read leases (docs/connections.md, "Read leases"), pure. A gateway may answer a connection's
// status from memory while it holds a lease on it; the connection service stores no change of that
// connection until every lease granted on it has ended (it fences new grants first, then waits).
// So a status answered from memory is the stored one, reads are monotonic across gateways, and a
// partner's own DELETE shows at once: it returns only after every lease on the connection ended.
//
// A gateway counts its lease from before it sent the request, on its own clock, so it ends before
// the service's. Replicas of the connection service compare lease ends on their own wall clocks:
// they must agree within `marginMs` (NTP keeps pods within milliseconds).

export interface LeaseRules {
  /** The longest lease; 0 turns leases off. */
  leaseMs: number;
  /** Slack for clock differences between replicas of the connection service. */
  marginMs: number;
}

/**
 * How long a read of `state` at `t.now` may be answered again: the lease, cut short where time alone
 * would change the answer (a pending window that ends: expired); 0 for no lease.
 */
export function grantableLeaseMs(state: ConnectionState, t: Timing, rules: LeaseRules): number {
  if (rules.leaseMs <= 0) return 0;
  const status = effectiveStatus(state, t);
  if ((status === "pending" || status === "declined") && !awaitingSandboxApproval(state)) {
    const expiresInMs = state.pendingSince.getTime() + t.pendingTtlSeconds * 1000 - t.now.getTime();
    return Math.max(0, Math.min(rules.leaseMs, expiresInMs - rules.marginMs));
  }
  return rules.leaseMs;
}

/** How long a writer that fenced new grants at `now` still waits for the leases granted before. */
export function leaseWaitMs(leasedUntil: Date | null | undefined, now: Date, rules: LeaseRules): number {
  if (!leasedUntil) return 0;
  return Math.max(0, leasedUntil.getTime() + rules.marginMs - now.getTime());
}

/** Until when a writer's fence holds off new grants: its wait, its write, and room to spare; a writer that died frees it then. */
export function fenceUntil(now: Date, rules: LeaseRules): Date {
  return new Date(now.getTime() + 2 * (rules.leaseMs + rules.marginMs) + 5_000);
}
