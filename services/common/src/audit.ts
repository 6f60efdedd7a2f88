import { RpcError, Status } from "./errors.js";
import { outboxEntry, type OutboxEntry } from "./persistence.js";

// The audit trail's records, as pure functions (docs/security.md, "Audit trail"). A record says who
// (actor) did what (action) to which ids (targets), when, and whether it was done or refused. It is
// built ONLY from the closed lists and the id shapes below, so no secret, elder address, purpose,
// webhook address, partner name or file content can reach one: a target that is not an id is
// dropped, and a refusal's rule must be plain words (no digit, "@", "_", ".", ":" or "/").

/** Every action the trail records, by the service that makes the change. */
export const AUDIT_ACTIONS = [
  // auth: operator commands and what they change
  "partner.create",
  "partner.suspend",
  "partner.reinstate",
  "partner.set_webhook",
  "partner.rotate_signing_secret",
  "credential.create",
  "credential.revoke",
  "signing_key.create",
  "signing_key.rotate",
  "signing_key.revoke",
  // connection: the operator, caregivers, partners and the service's own rounds
  "elder.create",
  "connection.request",
  "connection.delete",
  "connection.approve",
  "connection.decline",
  "connection.sever",
  "connection.auto_approve",
  "connection.expire",
  // webhook: operator commands
  "webhook.resend",
  "webhook.recover",
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

export const AUDIT_SERVICES = ["auth", "connection", "webhook"] as const;
export type AuditService = (typeof AUDIT_SERVICES)[number];

/**
 * The one service that may write each action's records: the store keeps a record only when the
 * service it names owns its action and signed it (auditSignedBytes), so a service cannot write
 * another's kind of record (a forged "credential.revoke" from the webhook service is dropped).
 */
export const AUDIT_ACTION_OWNERS: Readonly<Record<AuditAction, AuditService>> = {
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
};

/** The fields of a record on the audit-events topic that its signature covers (every one but the signature). */
export interface SignedAuditFields {
  id: string;
  occurredAt: bigint;
  service: string;
  actor: string;
  action: string;
  targets: readonly string[];
  outcome: number;
  reason: string;
  sequence: bigint;
  signingKid: string;
}

/** The bytes a record's Ed25519 signature covers: its fields in a fixed order, as JSON. */
export function auditSignedBytes(r: SignedAuditFields): Buffer {
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

/** Who acted: the operator (CLI), the elder's caregiver (the app), the service itself, or a partner by its id. */
export type AuditActor = "operator" | "caregiver" | "system" | `ptr_${string}`;

/** Why an act was refused, as a code; the caregiver acts add the state machine's rule. */
export const REFUSAL_CODES = [
  "invalid_argument",
  "not_found",
  "already_exists",
  "failed_precondition",
  "aborted",
  "permission_denied",
] as const;
export type RefusalCode = (typeof REFUSAL_CODES)[number];

/** The shape of every id the system makes (ids.ts): a short prefix, "_", base62. */
export const AUDIT_ID = /^(con|ptr|cli|eld|evt|key)_[0-9A-Za-z]{1,64}$/;
const PARTNER_ID = /^ptr_[0-9A-Za-z]{1,64}$/;
/** A refusal's rule: plain lower-case words. Ids, addresses, URLs and secrets all need a character it lacks. */
const RULE = /^[a-z][a-z ;,']{0,199}$/;
const MAX_TARGETS = 8;

export interface AuditFields {
  action: AuditAction;
  actor: AuditActor;
  /** The ids the act concerns, the main one first; anything not shaped like an id is left out. */
  targets: readonly (string | null | undefined)[];
  /** Absent when the act was done. */
  refused?: { code: RefusalCode; rule?: string };
}

/** The record as stored and published, without its id and time. */
export interface AuditRecordFields {
  service: AuditService;
  actor: AuditActor;
  action: AuditAction;
  targets: string[];
  outcome: "ok" | "refused";
  /** "" when ok; else the code, and ": rule" when there is one. */
  reason: string;
}

/** An audit record waiting in a document's `audit` outbox (audit-trail.ts). */
export type AuditEntry = AuditRecordFields & OutboxEntry & { sequence: number };

export class AuditShapeError extends Error {}

const isOneOf = <T extends string>(list: readonly T[], value: unknown): value is T =>
  typeof value === "string" && (list as readonly string[]).includes(value);

export function isAuditActor(value: unknown): value is AuditActor {
  return (
    value === "operator" ||
    value === "caregiver" ||
    value === "system" ||
    (typeof value === "string" && PARTNER_ID.test(value))
  );
}

/** The ids among `values`, each once, in order, at most MAX_TARGETS. */
export function auditTargets(values: readonly unknown[]): string[] {
  const ids = values.filter((v): v is string => typeof v === "string" && AUDIT_ID.test(v));
  return [...new Set(ids)].slice(0, MAX_TARGETS);
}

export function refusalReason(refused: { code: RefusalCode; rule?: string }): string {
  if (!isOneOf(REFUSAL_CODES, refused.code))
    throw new AuditShapeError(`unknown refusal code ${JSON.stringify(refused.code)}`);
  return refused.rule !== undefined && RULE.test(refused.rule) ? `${refused.code}: ${refused.rule}` : refused.code;
}

/** The record's fields, from nothing but the closed lists and the id shapes. Throws on an unknown action, actor or service. */
export function shapeAudit(service: AuditService, fields: AuditFields): AuditRecordFields {
  if (!isOneOf(AUDIT_SERVICES, service)) throw new AuditShapeError(`unknown service ${JSON.stringify(service)}`);
  if (!isOneOf(AUDIT_ACTIONS, fields.action))
    throw new AuditShapeError(`unknown action ${JSON.stringify(fields.action)}`);
  if (!isAuditActor(fields.actor))
    throw new AuditShapeError("the actor is neither a partner id nor operator, caregiver or system");
  return {
    service,
    actor: fields.actor,
    action: fields.action,
    targets: auditTargets(fields.targets),
    outcome: fields.refused ? "refused" : "ok",
    reason: fields.refused ? refusalReason(fields.refused) : "",
  };
}

let sequence = 0;

/**
 * A new audit entry (a fresh evt_ id, the time, the trace context) to store with the change it
 * records. Its sequence orders this process's entries within one millisecond (a partner and its
 * first credential are often created in the same one).
 */
export function auditEntry(service: AuditService, fields: AuditFields, at = new Date()): AuditEntry {
  return outboxEntry({ ...shapeAudit(service, fields), sequence: ++sequence }, at);
}

const REASON = new RegExp(`^(${REFUSAL_CODES.join("|")})(: ${RULE.source.slice(1, -1)})?$`);

/**
 * A record read back (from Kafka, by the store), checked field by field against the same rules;
 * null when anything is off. Only the fields of a record are kept.
 */
export function checkAuditRecord(r: {
  service: unknown;
  actor: unknown;
  action: unknown;
  targets: unknown;
  outcome: unknown;
  reason: unknown;
}): AuditRecordFields | null {
  if (!isOneOf(AUDIT_SERVICES, r.service) || !isOneOf(AUDIT_ACTIONS, r.action) || !isAuditActor(r.actor)) return null;
  if (AUDIT_ACTION_OWNERS[r.action] !== r.service) return null;
  if (
    !Array.isArray(r.targets) ||
    r.targets.length > MAX_TARGETS ||
    !r.targets.every((t) => typeof t === "string" && AUDIT_ID.test(t))
  )
    return null;
  if (r.outcome === "ok" && r.reason === "")
    return {
      service: r.service,
      actor: r.actor,
      action: r.action,
      targets: [...(r.targets as string[])],
      outcome: "ok",
      reason: "",
    };
  if (r.outcome === "refused" && typeof r.reason === "string" && REASON.test(r.reason)) {
    return {
      service: r.service,
      actor: r.actor,
      action: r.action,
      targets: [...(r.targets as string[])],
      outcome: "refused",
      reason: r.reason,
    };
  }
  return null;
}

const refusalCodes: Partial<Record<Status, RefusalCode>> = {
  [Status.INVALID_ARGUMENT]: "invalid_argument",
  [Status.NOT_FOUND]: "not_found",
  [Status.ALREADY_EXISTS]: "already_exists",
  [Status.FAILED_PRECONDITION]: "failed_precondition",
  [Status.ABORTED]: "aborted",
  [Status.PERMISSION_DENIED]: "permission_denied",
};

/**
 * The refusal an error stands for: a service's deliberate "no" (a RpcError with one of the
 * codes above). Anything else (the database or Kafka unreachable, a bug) is no decision, so
 * nothing is recorded: a change that was made is recorded with the change itself.
 */
export function refusalOf(err: unknown): { code: RefusalCode } | undefined {
  const code = err instanceof RpcError ? refusalCodes[err.code] : undefined;
  return code ? { code } : undefined;
}
