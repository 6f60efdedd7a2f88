import { fromBinary } from "@bufbuild/protobuf";
import type { KafkaMessage } from "kafkajs";
import type { Collection, Db, Filter } from "mongodb";
import { eventsv1 } from "@pi/proto";
import {
  AUDIT_ID,
  checkAuditRecord,
  consumed,
  consumerGroup,
  CONSUMER_HEARTBEAT_MS,
  CONSUMER_MAX_WAIT_MS,
  CONSUMER_SESSION_TIMEOUT_MS,
  disconnectConsumer,
  insertNew,
  topicName,
  watchConsumer,
  watchConsumerLag,
  type AuditRecordFields,
  type Kafka,
  type Logger,
} from "@pi/common";

// The store of the audit trail (docs/security.md, "Audit trail"). Every service publishes its
// records to the audit-events topic (@pi/common audit-trail.ts); the auth service, which owns the
// operator's side of the system, reads them in one consumer group and keeps each in the
// collection audit_records under its id. The store is append-only: this module is the only code
// that writes the collection, and it only inserts. A record already there (the outbox published it
// twice, or Kafka delivered it again) is left as it is.

export interface AuditRecordDoc extends AuditRecordFields {
  _id: string; // the record's evt_ id
  occurredAt: Date;
  /** Write order within the writing process (a tie-break within one millisecond). */
  sequence: number;
  /** Where it was read: within one partition (one document's records) the offset keeps their order. */
  partition: number;
  offset: number;
  storedAt: Date;
}

export const DEFAULT_AUDIT_LIMIT = 100;
export const MAX_AUDIT_LIMIT = 1000;

export interface AuditQuery {
  since?: Date;
  target?: string;
  limit: number;
}

/** Append and read, nothing else: no update, no delete. */
export interface AuditStore {
  append(docs: AuditRecordDoc[]): Promise<number>;
  list(query: AuditQuery): Promise<AuditRecordDoc[]>;
}

/** The query of a listing, checked: null target or since when absent. Throws a message for a bad one. */
export function auditQuery(req: { since: bigint; target: string; limit: number }): AuditQuery {
  if (req.limit < 0 || req.limit > MAX_AUDIT_LIMIT) throw new RangeError(`limit must be 0 to ${MAX_AUDIT_LIMIT}`);
  if (req.since < 0n) throw new RangeError("since must be Unix milliseconds, or 0 for all");
  if (req.target !== "" && !AUDIT_ID.test(req.target)) throw new RangeError("target must be an id (con_, ptr_, cli_, eld_, evt_ or key_)");
  return {
    ...(req.since > 0n ? { since: new Date(Number(req.since)) } : {}),
    ...(req.target !== "" ? { target: req.target } : {}),
    limit: req.limit || DEFAULT_AUDIT_LIMIT,
  };
}

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

const outcomeName: Record<number, string> = { [eventsv1.AuditOutcome.OK]: "ok", [eventsv1.AuditOutcome.REFUSED]: "refused" };

/** The stored record of one message, or null (logged) for one that can never make a record. */
export function decodeAuditMessage(message: KafkaMessage, partition: number, logger: Logger, now: Date): AuditRecordDoc | null {
  const at = { partition, offset: message.offset };
  if (!message.value) {
    logger.error(at, "empty audit record skipped");
    return null;
  }
  let r: eventsv1.AuditRecord;
  try {
    r = fromBinary(eventsv1.AuditRecordSchema, message.value);
  } catch (err) {
    logger.error({ ...at, err }, "unreadable audit record skipped");
    return null;
  }
  // The writer shaped it with the same rules; checked again so that nothing else is ever stored.
  const fields = /^evt_[0-9A-Za-z]{1,64}$/.test(r.id) && r.occurredAt > 0n ? checkAuditRecord({ ...r, outcome: outcomeName[r.outcome] }) : null;
  if (!fields) {
    logger.error({ ...at, id: r.id }, "malformed audit record skipped");
    return null;
  }
  return { _id: r.id, occurredAt: new Date(Number(r.occurredAt)), ...fields, sequence: Number(r.sequence), partition, offset: Number(message.offset), storedAt: now };
}

/**
 * Reads the audit-events topic in the auth service's audit group, a batch at a time. kafkajs
 * commits a batch's offsets only once eachBatch returns, so every record is stored before its
 * offset is committed (at least once); a database failure throws and the batch is read again.
 */
export async function consumeAuditRecords(store: AuditStore, kafka: Kafka, namespace: string, logger: Logger) {
  const consumer = kafka.consumer({
    groupId: consumerGroup(namespace, "auth", "audit"),
    sessionTimeout: CONSUMER_SESSION_TIMEOUT_MS,
    heartbeatInterval: CONSUMER_HEARTBEAT_MS,
    maxWaitTimeInMs: CONSUMER_MAX_WAIT_MS,
  });
  const alive = watchConsumer(consumer, "audit-events", logger);
  await consumer.connect();
  const topic = topicName(namespace, "auditEvents");
  await consumer.subscribe({ topic, fromBeginning: true });
  const lag = watchConsumerLag(kafka, consumerGroup(namespace, "auth", "audit"), topic, logger);
  await consumer.run({
    partitionsConsumedConcurrently: 3,
    eachBatch: async ({ batch, heartbeat }) => {
      const now = new Date();
      const docs = batch.messages.map((m) => decodeAuditMessage(m, batch.partition, logger, now)).filter((d): d is AuditRecordDoc => d !== null);
      const stored = await consumed(topic, batch.messages.length, () => store.append(docs));
      logger.debug({ partition: batch.partition, messages: batch.messages.length, stored }, "audit records stored");
      await heartbeat();
    },
  });
  return { alive, stop: async () => void (await Promise.all([lag.stop(), disconnectConsumer(consumer, "audit-events", logger)])) };
}
