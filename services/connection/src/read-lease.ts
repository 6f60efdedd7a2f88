import {
  awaitingSandboxApproval,
  effectiveStatus,
  externalStatus,
  type ConnectionState,
  type InternalStatus,
  type Timing,
} from "./state-machine.js";

// Read leases (docs/connections.md, "Read leases"), pure. A gateway may answer a connection's
// status from memory while it holds a lease on it; the connection service stores no change of what
// a partner sees of that connection until every lease granted on it has ended (it fences new grants
// first, then waits). So a status answered from memory is the stored one, reads are monotonic across
// gateways, and a partner's own DELETE shows at once: it returns only after every lease on it ended.
//
// A change a partner cannot see (a decline: it reads pending, as before, at every age) waits for no
// lease and fences nothing, and a lease is granted on what the partner sees, not on the document's
// version: a decline neither slows nor stops the polls of the connection it declines, so their
// timing says nothing of it (no-oracle guarantee 4).
//
// A gateway counts its lease from before it sent the request, on its own clock, so it ends before
// the service's. Replicas of the connection service compare lease ends on the database's clock as
// each measures it (clock-offset.ts): a replica that cannot vouch for its clock grants no lease.

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

/**
 * Whether a partner reads `after` exactly as `before`, now and at every later time: the same
 * external status, and the same pending window and sandbox schedule, on which time alone changes it.
 * Such a change (a decline, the sweep storing an expiry a partner already reads) waits for no lease.
 */
export function partnerSeesNoChange(before: ConnectionState, after: ConnectionState, t: Timing): boolean {
  return (
    externalStatus(before, t) === externalStatus(after, t) &&
    before.pendingSince.getTime() === after.pendingSince.getTime() &&
    (before.approveAt?.getTime() ?? null) === (after.approveAt?.getTime() ?? null) &&
    awaitingSandboxApproval(before) === awaitingSandboxApproval(after)
  );
}

/** The stored statuses a partner reads as `status` does (before time is applied): a lease holds while the document keeps one of them. */
export function statusesReadAlike(status: InternalStatus): InternalStatus[] {
  return status === "pending" || status === "declined" ? ["pending", "declined"] : [status];
}

/** How long a writer that fenced new grants at `now` still waits for the leases granted before. */
export function leaseWaitMs(leasedUntil: Date | null | undefined, now: Date, rules: LeaseRules): number {
  if (!leasedUntil) return 0;
  return Math.max(0, leasedUntil.getTime() + rules.marginMs - now.getTime());
}

/** Room for a writer's read and write after its wait, within its fence. */
export const FENCE_WRITE_MS = 1_000;

/**
 * Until when a writer's fence holds off new grants: the longest wait for the leases granted before
 * it, then its read and write. A writer that died frees it then (at most 2.25 s with the defaults;
 * polls meanwhile read through, none fails); a writer still alive fences again if it needs longer.
 */
export function fenceUntil(now: Date, rules: LeaseRules): Date {
  return new Date(now.getTime() + rules.leaseMs + rules.marginMs + FENCE_WRITE_MS);
}
