import { sign } from "node:crypto";
import { create, toBinary } from "@bufbuild/protobuf";
import type { Collection, Db, Document, WithId } from "mongodb";
import type { Producer } from "../events/kafka.js";
import { eventsv1 } from "@pi/proto";
import {
  auditEntry,
  auditSignedBytes,
  refusalOf,
  type AuditEntry,
  type AuditFields,
  type AuditService,
} from "./audit.js";
import { parseOwnIdentity, type OwnIdentity } from "../rpc/service-identity.js";
import type { Logger } from "../runtime/logger.js";
import { Outbox } from "./persistence.js";

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

/** The update that stores `entry` with a change: merge it into the change's update. */
export function pushAudit(entry: AuditEntry): { $push: { audit: AuditEntry } } {
  return { $push: { audit: entry } };
}

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
      /** How often each audit outbox is swept for records a dead replica left. */
      sweepEveryMs?: number;
    },
  ) {
    this.identity = o.signingKey ? parseOwnIdentity(o.signingKey) : undefined;
    this.standalone = o.db.collection<StandaloneDoc>("audit_outbox");
    this.standaloneOutbox = this.on(this.standalone, { dropEmpty: true });
  }

  /** A record to store with a change (pushAudit, or an `audit: [entry]` field of an insert). */
  entry(fields: AuditFields, at?: Date): AuditEntry {
    return auditEntry(this.o.service, fields, at);
  }

  /** The audit outbox of a collection whose documents carry records: call `afterWrite(id)` after each write that stored one. */
  on<D extends Document>(
    collection: Collection<D>,
    opts: {
      /** The message key of a document's records (its _id by default): one document's records stay in order. */
      key?(doc: WithId<D>): string;
      /** What logs name a document by, when its _id must not be logged (an elder's address). */
      logId?(id: unknown): unknown;
      dropEmpty?: boolean;
    } = {},
  ): Outbox<D, AuditEntry> {
    const outbox = new Outbox<D, AuditEntry>({
      name: `${this.o.service} audit records`,
      collection,
      producer: this.o.producer,
      topic: this.o.topic,
      logger: this.o.logger,
      field: "audit",
      lease: { until: "auditRelayUntil", holder: "auditRelayHolder" },
      key: opts.key ?? ((doc) => String(doc._id)),
      value: (_doc, entry) => {
        const message = auditRecordMessage(entry);
        return toBinary(
          eventsv1.AuditRecordSchema,
          this.identity ? signedAuditRecord(message, this.identity) : message,
        );
      },
      eventName: (entry) => `audit ${entry.action}`,
      sweepEveryMs: this.o.sweepEveryMs ?? 10_000,
      ...(opts.logId ? { logId: opts.logId } : {}),
      ...(opts.dropEmpty ? { dropEmpty: true } : {}),
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
