import type { eventsv1 } from "@pi/proto";
import { RpcError, Status } from "../rpc/errors.js";
import { outboxEntry, type OutboxEntry } from "./persistence.js";

// The audit trail's records (docs/security.md, "Audit trail"), built ONLY from the closed lists and id
// shapes below, so no secret, address, purpose, partner name or file content can reach one.

export const AUDIT_SERVICES = ["auth", "connection", "webhook"] as const;
export type AuditService = (typeof AUDIT_SERVICES)[number];

/** Every action the trail records, and the one service whose signed records of it the store keeps. */
export const AUDIT_ACTION_OWNERS = {
  "partner.create": "auth",
  "partner.suspend": "auth",
  "partner.reinstate": "auth",
  "partner.set_webhook": "auth",
  "partner.rotate_signing_secret": "auth",
  "credential.create": "auth",
  "credential.revoke": "auth",
  "signing_key.create": "auth",
  "signing_key.rotate": "auth",
  "signing_key.revoke": "auth",
  "elder.create": "connection",
  "connection.request": "connection",
  "connection.delete": "connection",
  "connection.approve": "connection",
  "connection.decline": "connection",
  "connection.sever": "connection",
  "connection.auto_approve": "connection",
  "connection.expire": "connection",
  "webhook.resend": "webhook",
  "webhook.recover": "webhook",
} as const satisfies Record<string, AuditService>;
export type AuditAction = keyof typeof AUDIT_ACTION_OWNERS;
export const AUDIT_ACTIONS = Object.keys(AUDIT_ACTION_OWNERS) as AuditAction[];

/** The bytes a record's Ed25519 signature covers: every field but the signature, in a fixed order, as JSON. */
export function auditSignedBytes(r: Omit<eventsv1.AuditRecord, "$typeName" | "$unknown" | "signature">): Buffer {
  return Buffer.from(
    JSON.stringify([
      "pi-audit-record-v1",
      r.id,
      String(r.occurredAt),
      r.service,
      r.actor,
      r.action,
      [...r.targets],
      r.outcome,
      r.reason,
      String(r.sequence),
      r.signingKid,
    ]),
  );
}

export type AuditActor = "operator" | "caregiver" | "system" | `ptr_${string}`;

/** Why an act was refused, as a code (from the error's code); the caregiver acts add the state machine's rule. */
const refusalCodes = {
  [Status.INVALID_ARGUMENT]: "invalid_argument",
  [Status.NOT_FOUND]: "not_found",
  [Status.ALREADY_EXISTS]: "already_exists",
  [Status.FAILED_PRECONDITION]: "failed_precondition",
  [Status.ABORTED]: "aborted",
  [Status.PERMISSION_DENIED]: "permission_denied",
} as const;
export type RefusalCode = (typeof refusalCodes)[keyof typeof refusalCodes];
const REFUSAL_CODES: readonly RefusalCode[] = Object.values(refusalCodes);

export const AUDIT_ID = /^(con|ptr|cli|eld|evt|key)_[0-9A-Za-z]{1,64}$/;
const PARTNER_ID = /^ptr_[0-9A-Za-z]{1,64}$/;
/** A refusal's rule: plain lower-case words. Ids, addresses, URLs and secrets all need a character it lacks. */
const RULE = /^[a-z][a-z ;,']{0,199}$/;
const REASON = new RegExp(`^(${REFUSAL_CODES.join("|")})(: ${RULE.source.slice(1, -1)})?$`);
const MAX_TARGETS = 8;

export interface AuditFields {
  action: AuditAction;
  actor: AuditActor;
  /** The ids the act concerns, the main one first; anything not shaped like an id is left out. */
  targets: readonly (string | null | undefined)[];
  refused?: { code: RefusalCode; rule?: string };
}

export interface AuditRecordFields {
  service: AuditService;
  actor: AuditActor;
  action: AuditAction;
  targets: string[];
  outcome: "ok" | "refused";
  /** "" when ok; else the code, and ": rule" when there is one. */
  reason: string;
}

export type AuditEntry = AuditRecordFields & OutboxEntry & { sequence: number };

export class AuditShapeError extends Error {}

const isOneOf = <T extends string>(list: readonly T[], value: unknown): value is T =>
  typeof value === "string" && (list as readonly string[]).includes(value);

export function isAuditActor(value: unknown): value is AuditActor {
  return isOneOf(["operator", "caregiver", "system"], value) || (typeof value === "string" && PARTNER_ID.test(value));
}

/** The record's fields, from nothing but the closed lists and the id shapes. Throws on an unknown action, actor or service. */
export function shapeAudit(service: AuditService, fields: AuditFields): AuditRecordFields {
  if (!isOneOf(AUDIT_SERVICES, service)) throw new AuditShapeError(`unknown service ${JSON.stringify(service)}`);
  if (!isOneOf(AUDIT_ACTIONS, fields.action))
    throw new AuditShapeError(`unknown action ${JSON.stringify(fields.action)}`);
  if (!isAuditActor(fields.actor))
    throw new AuditShapeError("the actor is neither a partner id nor operator, caregiver or system");
  const { refused } = fields;
  if (refused && !isOneOf(REFUSAL_CODES, refused.code))
    throw new AuditShapeError(`unknown refusal code ${JSON.stringify(refused.code)}`);
  const ids = fields.targets.filter((v): v is string => typeof v === "string" && AUDIT_ID.test(v));
  return {
    service,
    actor: fields.actor,
    action: fields.action,
    targets: [...new Set(ids)].slice(0, MAX_TARGETS),
    outcome: refused ? "refused" : "ok",
    reason: !refused
      ? ""
      : refused.rule !== undefined && RULE.test(refused.rule)
        ? `${refused.code}: ${refused.rule}`
        : refused.code,
  };
}

let sequence = 0;

/** A new entry to store with its change; the sequence orders this process's entries within one millisecond. */
export function auditEntry(service: AuditService, fields: AuditFields, at = new Date()): AuditEntry {
  return outboxEntry({ ...shapeAudit(service, fields), sequence: ++sequence }, at);
}

/** A record read back (from Kafka, by the store), checked against the same rules: its fields only, or null. */
export function checkAuditRecord(r: Record<keyof AuditRecordFields, unknown>): AuditRecordFields | null {
  if (!isOneOf(AUDIT_SERVICES, r.service) || !isOneOf(AUDIT_ACTIONS, r.action) || !isAuditActor(r.actor)) return null;
  if (AUDIT_ACTION_OWNERS[r.action] !== r.service) return null;
  const targets = r.targets;
  if (
    !Array.isArray(targets) ||
    targets.length > MAX_TARGETS ||
    !targets.every((t) => typeof t === "string" && AUDIT_ID.test(t))
  )
    return null;
  const ok = r.outcome === "ok" && r.reason === "";
  const refused = r.outcome === "refused" && typeof r.reason === "string" && REASON.test(r.reason);
  if (!ok && !refused) return null;
  const { service, actor, action, outcome, reason } = r as AuditRecordFields;
  return { service, actor, action, targets: [...targets], outcome, reason };
}

/** The refusal an error stands for: a deliberate "no"; anything else (an outage, a bug) decided nothing. */
export function refusalOf(err: unknown): { code: RefusalCode } | undefined {
  const code = err instanceof RpcError ? (refusalCodes as Partial<Record<Status, RefusalCode>>)[err.code] : undefined;
  return code ? { code } : undefined;
}
