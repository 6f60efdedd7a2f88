import { RpcError, Status } from "@pi/common/rpc/errors";
import { isAuditActor, type AuditAction, type AuditActor, type AuditFields } from "@pi/common/store/audit";
import type { Trigger } from "./state-machine.js";

// A test helper rehearses the caregiver's act (or the window's end): the same action, with the
// partner as its actor (as the previous release records it too).
const actionOf = (trigger: Trigger) => `connection.${trigger.replace(/^test_/, "")}` as AuditAction;

export function partnerActor(partnerId: string): AuditActor {
  if (!partnerId.startsWith("ptr_") || !isAuditActor(partnerId))
    throw new RpcError("partner_id must be a partner id (ptr_...)", Status.INVALID_ARGUMENT);
  return partnerId;
}

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
