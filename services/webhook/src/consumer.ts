import { fromBinary } from "@bufbuild/protobuf";
import { commonv1, eventsv1 } from "@pi/proto";
import { consumerGroup, newId, topicName, type Kafka, type Logger } from "@pi/common";
import { checkSourceEvent, webhookBody, type SourceCheck } from "./event-body.js";
import type { WebhookEventDoc, WebhookStore } from "./store.js";

type Source = Extract<SourceCheck, { ok: true }>;

function isDuplicateKey(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === 11000;
}

/**
 * Stores the webhook event of a connection event, due at once. Keyed on the source event id, so a
 * connection event seen again (Kafka redelivers after a crash, or the producer sent it twice)
 * makes no second event. Returns whether this call created it.
 */
export async function storeWebhookEvent(store: WebhookStore, src: Source, mode: WebhookEventDoc["mode"], now = new Date()): Promise<boolean> {
  const id = newId("evt");
  const doc: WebhookEventDoc = {
    _id: id,
    sourceEventId: src.sourceEventId,
    partnerId: src.partnerId,
    connectionId: src.connectionId,
    mode,
    type: src.type,
    body: webhookBody(id, src.type, src.occurredAtMs, src.connectionId, src.status),
    createdAt: now,
    state: "pending",
    attempts: 0,
    attemptLog: [],
    nextAttemptAt: now,
    leaseToken: null,
  };
  try {
    // A plain insert, not an upsert: the unique index on sourceEventId makes the second one fail,
    // and FerretDB v1 drops empty arrays and nulls from an upsert's $setOnInsert.
    await store.events.insertOne(doc);
    return true;
  } catch (err) {
    if (isDuplicateKey(err)) return false;
    throw err;
  }
}

/**
 * Reads the connection-events topic in the webhook group. kafkajs resolves a message's offset only
 * after eachMessage resolves, and commits only resolved offsets (also when a later message
 * throws), so an event is in the database before its offset is committed: at least once.
 * A database failure throws, and kafkajs retries the message; an unreadable message is logged and
 * skipped, since retrying it can never succeed.
 */
export async function consumeConnectionEvents(store: WebhookStore, kafka: Kafka, namespace: string, logger: Logger, onStored: () => void) {
  const consumer = kafka.consumer({
    groupId: consumerGroup(namespace, "webhook"),
    // A replica that dies hands its partitions over within seconds, not the default 30.
    sessionTimeout: 10_000,
    heartbeatInterval: 1_000,
    maxWaitTimeInMs: 100,
  });
  await consumer.connect();
  await consumer.subscribe({ topic: topicName(namespace, "connectionEvents"), fromBeginning: true });
  await consumer.run({
    partitionsConsumedConcurrently: 3,
    eachMessage: async ({ partition, message }) => {
      const where = { partition, offset: message.offset };
      if (!message.value) {
        logger.error(where, "empty connection event skipped");
        return;
      }
      let event: eventsv1.ConnectionEvent;
      try {
        event = fromBinary(eventsv1.ConnectionEventSchema, message.value);
      } catch (err) {
        logger.error({ ...where, err }, "unreadable connection event skipped");
        return;
      }
      const src = checkSourceEvent(event, Date.now());
      if (!src.ok) {
        logger.error({ ...where, sourceEventId: event.eventId, reason: src.reason }, "connection event skipped");
        return;
      }
      if (src.statusMismatch !== undefined) {
        logger.warn({ ...where, sourceEventId: src.sourceEventId, status: src.statusMismatch, type: src.type }, "connection event status disagrees with its type");
      }
      const created = await storeWebhookEvent(store, src, event.mode === commonv1.Mode.TEST ? "test" : "live");
      logger.debug({ sourceEventId: src.sourceEventId, partnerId: src.partnerId, created }, "connection event stored");
      if (created) onStored();
    },
  });
  return { stop: () => consumer.disconnect() };
}
