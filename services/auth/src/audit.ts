import { verify, type KeyObject } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import type { Collection, Db, Filter } from "mongodb";
import { eventsv1 } from "@pi/proto";
import {
  AUDIT_ID,
  auditRecordMessage,
  auditSignedBytes,
  checkAuditRecord,
  type AuditRecordFields,
} from "@pi/common/store/audit";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { consume, type Consuming } from "@pi/common/background/consume";
import { consumerGroup, topicName } from "@pi/common/events/topics";
import { databaseName } from "@pi/common/store/mongo";
import { insertNew } from "@pi/common/store/persistence";
import type { Kafka, KafkaMessage } from "@pi/common/events/kafka";
import type { Logger } from "@pi/common/runtime/logger";
import type { PublicKeys } from "@pi/common/rpc/service-identity";

// The audit trail's store (docs/security.md, "Audit trail"): append-only within its retention, each
// record kept with its writer's signature, which every read checks again.

export interface AuditRecordDoc extends AuditRecordFields {
  _id: string; // the record's evt_ id
  occurredAt: Date;
  /** Write order within the writing process (a tie-break within one millisecond). */
  sequence: number;
  /** Where it was read: within one partition (one document's records) the offset keeps their order. */
  partition: number;
  offset: number;
  storedAt: Date;
  /** The writing service's signature (auditSignedBytes) and its key id, as received; absent on records stored before they were kept. */
  signature?: string;
  signingKid?: string;
}

export const DEFAULT_AUDIT_LIMIT = 100;
export const MAX_AUDIT_LIMIT = 1000;

export interface AuditQuery {
  since?: Date;
  target?: string;
  limit: number;
}

/** Append and read: what the appending role (auditAppend) may do. No update, no delete. */
export interface AuditStore {
  append(docs: AuditRecordDoc[]): Promise<number>;
  list(query: AuditQuery): Promise<AuditRecordDoc[]>;
}

export const auditRetentionCutoff = (now: Date, retentionSeconds: number) =>
  new Date(now.getTime() - retentionSeconds * 1000);

export const AUDIT_SWEEP_EVERY_MS = 60 * 60_000;
export const AUDIT_SWEEP_LEASE = "audit-retention-sweep";

export function auditQuery(req: { since: bigint; target: string; limit: number }): AuditQuery {
  const refuse = (message: string) => new RpcError(message, Status.INVALID_ARGUMENT);
  if (req.limit < 0 || req.limit > MAX_AUDIT_LIMIT) throw refuse(`limit must be 0 to ${MAX_AUDIT_LIMIT}`);
  if (req.since < 0n) throw refuse("since must be Unix milliseconds, or 0 for all");
  if (req.target !== "" && !AUDIT_ID.test(req.target))
    throw refuse("target must be an id (con_, ptr_, cli_, eld_, evt_ or key_)");
  return {
    ...(req.since > 0n ? { since: new Date(Number(req.since)) } : {}),
    ...(req.target !== "" ? { target: req.target } : {}),
    limit: req.limit || DEFAULT_AUDIT_LIMIT,
  };
}

export const auditDatabaseName = (namespace: string) => databaseName(namespace, "auth_audit");

export async function openAuditStore(db: Db): Promise<AuditStore> {
  const records: Collection<AuditRecordDoc> = db.collection<AuditRecordDoc>("audit_records");
  await records.createIndex({ occurredAt: -1 }, { name: "newest" });
  await records.createIndex({ targets: 1, occurredAt: -1 }, { name: "by_target" });
  return {
    async append(docs) {
      return docs.length - (await insertNew(records, docs)).length;
    },
    async list(q) {
      const filter: Filter<AuditRecordDoc> = {
        ...(q.since ? { occurredAt: { $gte: q.since } } : {}),
        ...(q.target ? { targets: q.target } : {}),
      };
      return records.find(filter).sort({ occurredAt: -1, sequence: -1, offset: -1, _id: -1 }).limit(q.limit).toArray();
    },
  };
}

/** The retention sweep's one delete (with its own database user where AUDIT_RETENTION_MONGODB_URI is set). */
export async function expireAuditRecords(db: Db, cutoff: Date): Promise<number> {
  return (await db.collection<AuditRecordDoc>("audit_records").deleteMany({ occurredAt: { $lt: cutoff } }))
    .deletedCount;
}

const keyOf = (publicKeys: PublicKeys, service: string, kid: string) =>
  (publicKeys as ReadonlyMap<string, ReadonlyMap<string, KeyObject>>).get(service)?.get(kid);

function signedByItsService(r: eventsv1.AuditRecord, publicKeys: PublicKeys): boolean {
  const key = keyOf(publicKeys, r.service, r.signingKid);
  try {
    return !!key && r.signature !== "" && verify(null, auditSignedBytes(r), key, Buffer.from(r.signature, "base64url"));
  } catch {
    return false;
  }
}

/** The stored record of one message, or null (logged): bad shape, an action its service does not own, or a bad signature. */
export function decodeAuditMessage(
  message: KafkaMessage,
  partition: number,
  logger: Logger,
  now: Date,
  publicKeys: PublicKeys,
): AuditRecordDoc | null {
  const skip = (fields: object, why: string) => {
    logger.error({ partition, offset: message.offset, ...fields }, why);
    return null;
  };
  if (!message.value) return skip({}, "empty audit record skipped");
  let r: eventsv1.AuditRecord;
  try {
    r = fromBinary(eventsv1.AuditRecordSchema, message.value);
  } catch (err) {
    return skip({ err }, "unreadable audit record skipped");
  }
  // The writer shaped it with the same rules; checked again so that nothing else is ever stored.
  const fields =
    /^evt_[0-9A-Za-z]{1,64}$/.test(r.id) && r.occurredAt > 0n
      ? checkAuditRecord({ ...r, outcome: eventsv1.AuditOutcome[r.outcome]?.toLowerCase() })
      : null;
  if (!fields) return skip({ id: r.id }, "malformed audit record skipped (or of an action its service does not own)");
  if (!signedByItsService(r, publicKeys))
    return skip({ id: r.id, service: fields.service }, "audit record not signed by the service it names skipped");
  return {
    _id: r.id,
    occurredAt: new Date(Number(r.occurredAt)),
    ...fields,
    sequence: Number(r.sequence),
    partition,
    offset: Number(message.offset),
    storedAt: now,
    signature: r.signature,
    signingKid: r.signingKid,
  };
}

export const AUDIT_VERIFICATION = {
  verified: "verified",
  altered: "signature does not match the record",
  unknownKey: "signing key not known",
  notKept: "stored before signatures were kept",
} as const;

export function storedRecordMessage(doc: AuditRecordDoc): eventsv1.AuditRecord {
  return {
    ...auditRecordMessage({ ...doc, eventId: doc._id }),
    signature: doc.signature ?? "",
    signingKid: doc.signingKid ?? "",
  };
}

export function verifyStoredRecord(doc: AuditRecordDoc, publicKeys: PublicKeys): { verified: boolean; reason: string } {
  if (!doc.signature || !doc.signingKid) return { verified: false, reason: AUDIT_VERIFICATION.notKept };
  if (!keyOf(publicKeys, doc.service, doc.signingKid))
    return { verified: false, reason: AUDIT_VERIFICATION.unknownKey };
  let verified = false;
  try {
    verified = signedByItsService(storedRecordMessage(doc), publicKeys);
  } catch {
    // A stored field no message can carry: altered.
  }
  return { verified, reason: verified ? AUDIT_VERIFICATION.verified : AUDIT_VERIFICATION.altered };
}

export function consumeAuditRecords(
  store: AuditStore,
  kafka: Kafka,
  namespace: string,
  publicKeys: PublicKeys,
  logger: Logger,
): Promise<Consuming> {
  return consume({
    kafka,
    logger,
    group: consumerGroup(namespace, "auth", "audit"),
    topic: topicName(namespace, "auditEvents"),
    name: "audit-events",
    quickHandover: true,
    partitionsConsumedConcurrently: 3,
    async eachBatch(messages, partition) {
      const now = new Date();
      const docs = messages
        .map((m) => decodeAuditMessage(m, partition, logger, now, publicKeys))
        .filter((d): d is AuditRecordDoc => d !== null);
      const stored = await store.append(docs);
      logger.debug({ partition, messages: messages.length, stored }, "audit records stored");
    },
  });
}
