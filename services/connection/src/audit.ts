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

/** The caregiver's acts, the system's rounds, and the partner for everything else (its test helpers too). */
export function actorOf(trigger: Trigger, partnerId: string): AuditActor {
  if (trigger === "approve" || trigger === "decline" || trigger === "sever") return "caregiver";
  if (trigger === "auto_approve" || trigger === "expire") return "system";
  return partnerActor(partnerId);
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
