import { sign } from "node:crypto";
import { create, toBinary } from "@bufbuild/protobuf";
import type { Collection, Db, Document } from "mongodb";
import { eventsv1 } from "@pi/proto";
import type { Producer } from "../events/kafka.js";
import { RpcError, Status } from "../rpc/errors.js";
import { parseOwnIdentity, type OwnIdentity } from "../rpc/service-identity.js";
import type { Logger } from "../runtime/logger.js";
import { Outbox, outboxEntry, type OutboxEntry, type OutboxOptions } from "./persistence.js";

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

// How a service writes audit records (docs/security.md, "Audit trail"). A change and its record are
// ONE document update: the record is pushed into the changed document's `audit` array (an outbox
// of its own beside the document's events) and relayed to the audit-events topic by the outbox of
// persistence.ts. A refusal changes nothing: its record is inserted alone (collection audit_outbox)
// and relayed the same way, its document deleted once relayed.

export interface AuditCarrier {
  audit?: AuditEntry[];
  auditRelayUntil?: Date | null;
  auditRelayHolder?: string | null;
}

/** Field names of that bookkeeping (for tests that list a document's fields). */
export const AUDIT_BOOKKEEPING = ["audit", "auditRelayUntil", "auditRelayHolder"] as const;

const outcomeEnum = { ok: eventsv1.AuditOutcome.OK, refused: eventsv1.AuditOutcome.REFUSED } as const;

/** The message of the audit-events topic for one entry. */
export function auditRecordMessage(entry: AuditEntry): eventsv1.AuditRecord {
  return create(eventsv1.AuditRecordSchema, {
    id: entry.eventId,
    occurredAt: BigInt(entry.occurredAt.getTime()),
    service: entry.service,
    actor: entry.actor,
    action: entry.action,
    targets: entry.targets,
    outcome: outcomeEnum[entry.outcome],
    reason: entry.reason,
    sequence: BigInt(entry.sequence),
  });
}

/**
 * The message signed with the writing service's identity key (SERVICE_IDENTITY_KEY): the auth
 * service stores a record only when the service it names signed it (decodeAuditMessage).
 */
export function signedAuditRecord(record: eventsv1.AuditRecord, identity: OwnIdentity): eventsv1.AuditRecord {
  const unsigned = { ...record, signingKid: identity.kid };
  return create(eventsv1.AuditRecordSchema, {
    ...unsigned,
    signature: sign(null, auditSignedBytes(unsigned), identity.privateKey).toString("base64url"),
  });
}

/** A refusal's record, alone in its document until it is relayed. */
interface StandaloneDoc extends AuditCarrier {
  _id: string; // the record's event id
  createdAt: Date;
}

export class AuditTrail {
  private readonly outboxes: Outbox<Document, AuditEntry>[] = [];
  private readonly standalone: Collection<StandaloneDoc>;
  private readonly standaloneOutbox: Outbox<StandaloneDoc, AuditEntry>;
  private readonly identity: OwnIdentity | undefined;

  constructor(
    private readonly o: {
      service: AuditService;
      db: Db;
      producer: Pick<Producer, "send">;
      topic: string;
      logger: Logger;
      /** The service's SERVICE_IDENTITY_KEY, which signs every record (unsigned records are not stored). */
      signingKey: string | undefined;
    },
  ) {
    this.identity = o.signingKey ? parseOwnIdentity(o.signingKey) : undefined;
    this.standalone = o.db.collection<StandaloneDoc>("audit_outbox");
    this.standaloneOutbox = this.on(this.standalone, { dropEmpty: true });
  }

  /** A record to store with a change (`$push: { audit: entry }`, or an `audit: [entry]` field of an insert). */
  entry(fields: AuditFields, at?: Date): AuditEntry {
    return auditEntry(this.o.service, fields, at);
  }

  /** The audit outbox of a collection whose documents carry records (keyed by _id unless `key` says otherwise): call `afterWrite(id)` after each write that stored one. */
  on<D extends Document>(
    collection: Collection<D>,
    opts: Partial<Pick<OutboxOptions<D, AuditEntry>, "key" | "logId" | "dropEmpty">> = {},
  ): Outbox<D, AuditEntry> {
    const outbox = new Outbox<D, AuditEntry>({
      name: `${this.o.service} audit records`,
      collection,
      producer: this.o.producer,
      topic: this.o.topic,
      logger: this.o.logger,
      field: "audit",
      lease: { until: "auditRelayUntil", holder: "auditRelayHolder" },
      key: (doc) => String(doc._id),
      value: (_doc, entry) => {
        const message = auditRecordMessage(entry);
        return toBinary(
          eventsv1.AuditRecordSchema,
          this.identity ? signedAuditRecord(message, this.identity) : message,
        );
      },
      eventName: (entry) => `audit ${entry.action}`,
      sweepEveryMs: 10_000,
      ...opts,
    });
    this.outboxes.push(outbox as unknown as Outbox<Document, AuditEntry>);
    return outbox;
  }

  /** Records an act that changed nothing (a refusal, or an act that found its target as asked): stored before it returns. */
  async record(fields: AuditFields): Promise<void> {
    const entry = this.entry(fields);
    await this.standalone.insertOne({ _id: entry.eventId, createdAt: entry.occurredAt, audit: [entry] });
    this.standaloneOutbox.afterWrite(entry.eventId);
  }

  /**
   * Runs an act whose change (if any) records itself; a refusal (refusalOf) is recorded before the
   * error goes on. A refusal that cannot be recorded (the database is down) fails with that instead.
   */
  async refusals<T>(fields: Omit<AuditFields, "refused">, act: () => Promise<T>): Promise<T> {
    try {
      return await act();
    } catch (err) {
      const refused = refusalOf(err);
      if (refused) await this.record({ ...fields, refused });
      throw err;
    }
  }

  async start(): Promise<void> {
    await Promise.all(this.outboxes.map((o) => o.ensureIndex()));
    for (const o of this.outboxes) o.start();
  }

  /** Stops the sweeps and waits for the relays in flight, RELAY_STOP_MS at most. */
  async stop(): Promise<void> {
    await Promise.all(this.outboxes.map((o) => o.stop()));
  }
}
