import { RpcError, Status } from "@pi/common/errors";
import { isAuditActor, type AuditAction, type AuditActor, type AuditFields } from "@pi/common/audit";
import type { Trigger } from "./state-machine.js";

// Who does what to a connection, for its audit records (docs/security.md, "Audit trail").

/**
 * A trigger's action. A test helper is the caregiver's act (or the window's end) rehearsed by the
 * partner: the same action, with the partner as its actor (as the previous release records it too).
 */
const actionOf = (trigger: Trigger) => `connection.${trigger.replace(/^test_/, "")}` as AuditAction;

/** The partner as an actor; a partner id of another shape is a caller's mistake. */
export function partnerActor(partnerId: string): AuditActor {
  if (!partnerId.startsWith("ptr_") || !isAuditActor(partnerId))
    throw new RpcError("partner_id must be a partner id (ptr_...)", Status.INVALID_ARGUMENT);
  return partnerId;
}

/** Who pulls a trigger: the partner its request, delete and test helpers, the caregiver (the app) its acts, the service its rounds. */
export function actorOf(trigger: Trigger, partnerId: string): AuditActor {
  switch (trigger) {
    case "request":
    case "delete":
    case "test_approve":
    case "test_decline":
    case "test_sever":
    case "test_expire":
      return partnerActor(partnerId);
    case "approve":
    case "decline":
    case "sever":
      return "caregiver";
    case "auto_approve":
    case "expire":
      return "system";
  }
}

/** The record of a trigger on a connection: the connection, its partner and (when resolved) its elder, by id. */
export function connectionAudit(
  trigger: Trigger,
  doc: { _id: string; partnerId: string },
  elderId: string | null,
): AuditFields {
  return {
    action: actionOf(trigger),
    actor: actorOf(trigger, doc.partnerId),
    targets: [doc._id, doc.partnerId, elderId],
  };
}
