// The connection state machine, pure: every change goes through `transition` (docs/connections.md).

import type { PartnerMode } from "@pi/common/rules/mode";

export type InternalStatus = "pending" | "approved" | "declined" | "expired" | "revoked";
export type ExternalStatus = "pending" | "approved" | "expired" | "revoked";
export type ConnectionMode = PartnerMode;
export type EventType = "connection.approved" | "connection.revoked";

export interface ConnectionState {
  status: InternalStatus;
  mode: ConnectionMode;
  /** The address resolved to an elder under the mode's rule (test: only the sandbox; live: all but it). */
  resolved: boolean;
  pendingSince: Date;
  approveAt: Date | null;
}

export interface Timing {
  now: Date;
  pendingTtlSeconds: number;
  sandboxDelaySeconds: number;
}

export type Trigger =
  /** POST /v1/connections for a (partner, mode, address) that already has a connection. */
  "request" | "approve" | "decline" | "sever" | "auto_approve" | "delete" | "expire" | TestHelperTrigger;

export type TestHelperTrigger = "test_approve" | "test_decline" | "test_sever" | "test_expire";

export type Outcome =
  | { kind: "change"; to: InternalStatus; pendingSince?: Date; approveAt: Date | null; event: EventType | null }
  | { kind: "unchanged" }
  | { kind: "refused"; reason: string };

/** A test connection to the sandbox elder waiting for its automatic approval: it never expires. */
export function awaitingSandboxApproval(s: ConnectionState): boolean {
  return s.mode === "test" && s.status === "pending" && s.resolved && s.approveAt !== null;
}

export function effectiveStatus(s: ConnectionState, t: Timing): InternalStatus {
  if (s.status !== "pending" && s.status !== "declined") return s.status;
  if (awaitingSandboxApproval(s)) return s.status;
  const age = t.now.getTime() - s.pendingSince.getTime();
  return age >= t.pendingTtlSeconds * 1000 ? "expired" : s.status;
}

/** What a partner sees. A decline reads exactly like an undecided request, expiry included. */
export function externalStatus(s: ConnectionState, t: Timing): ExternalStatus {
  const status = effectiveStatus(s, t);
  return status === "declined" ? "pending" : status;
}

export function sandboxApproveAt(mode: ConnectionMode, resolved: boolean, t: Timing): Date | null {
  return mode === "test" && resolved ? new Date(t.now.getTime() + t.sandboxDelaySeconds * 1000) : null;
}

export function initialState(mode: ConnectionMode, resolved: boolean, t: Timing): ConnectionState {
  return { status: "pending", mode, resolved, pendingSince: t.now, approveAt: sandboxApproveAt(mode, resolved, t) };
}

const unchanged: Outcome = { kind: "unchanged" };
const refused = (reason: string): Outcome => ({ kind: "refused", reason });
const to = (status: InternalStatus, event: EventType | null = null): Extract<Outcome, { kind: "change" }> => ({
  kind: "change",
  to: status,
  approveAt: null,
  event,
});

type CaregiverAct = "approve" | "decline" | "sever";

/** Each act: the status it leads to, the statuses it leads from, its event, and what its refusal says. */
const CAREGIVER_ACTS: Record<
  CaregiverAct,
  { to: InternalStatus; from: InternalStatus[]; event: EventType | null; only: string }
> = {
  approve: {
    to: "approved",
    from: ["pending", "declined"],
    event: "connection.approved",
    only: "only a pending connection can be approved",
  },
  decline: { to: "declined", from: ["pending"], event: null, only: "only a pending connection can be declined" },
  sever: {
    to: "revoked",
    from: ["approved"],
    event: "connection.revoked",
    only: "only an approved connection can be severed",
  },
};

/** The caregiver acts on resolved live connections; a test helper (`byTestHelper`) stands in for it on test ones. */
function caregiverRule(s: ConnectionState, status: InternalStatus, act: CaregiverAct, byTestHelper: boolean): Outcome {
  const rule = CAREGIVER_ACTS[act];
  if (status === rule.to) return unchanged;
  if (!byTestHelper && s.mode === "test")
    return refused("test connections are approved automatically; no caregiver acts on them");
  // Only an approved connection can be severed, and only a resolved one is ever approved.
  if (!s.resolved && act !== "sever")
    return refused("the address does not resolve to an elder, so no caregiver can act on it");
  if (rule.from.includes(status)) return to(rule.to, rule.event);
  if (act === "decline" && status === "approved") return refused("the connection is approved; sever it instead");
  return refused(`the connection is ${status}; ${rule.only}`);
}

/** The test helper's expire: a pending window (declined or not) ends now, as its length would have ended it. */
function expireNow(status: InternalStatus): Outcome {
  if (status === "expired") return unchanged;
  if (status === "pending" || status === "declined") return to("expired");
  return refused(`the connection is ${status}; only a pending connection can expire`);
}

/** The table. `s.resolved` must be current for "request" and "approve". */
export function transition(s: ConnectionState, trigger: Trigger, t: Timing): Outcome {
  const status = effectiveStatus(s, t);
  switch (trigger) {
    case "request":
      // A reopening: a new pending window.
      if (status !== "expired" && status !== "revoked") return unchanged;
      return { ...to("pending"), pendingSince: t.now, approveAt: sandboxApproveAt(s.mode, s.resolved, t) };

    case "approve":
    case "decline":
    case "sever":
      return caregiverRule(s, status, trigger, false);

    case "test_approve":
    case "test_decline":
    case "test_sever":
    case "test_expire":
      if (s.mode !== "test") return refused("test helpers act only on test connections");
      if (trigger === "test_expire") return expireNow(status);
      return caregiverRule(s, status, trigger.slice("test_".length) as CaregiverAct, true);

    case "auto_approve":
      if (awaitingSandboxApproval(s) && s.approveAt!.getTime() <= t.now.getTime())
        return to("approved", "connection.approved");
      return unchanged;

    case "delete":
      if (status === "revoked") return unchanged;
      return to("revoked", status === "approved" ? "connection.revoked" : null);

    case "expire":
      return status === "expired" && s.status !== "expired" ? to("expired") : unchanged;
  }
}
