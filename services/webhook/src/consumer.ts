import { fromBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import { consume, type Consuming } from "@pi/common/background/consume";
import { consumerGroup, topicName } from "@pi/common/events/topics";
import { contextFromHeaders, traceHeaders } from "@pi/common/runtime/telemetry";
import { insertNew } from "@pi/common/store/persistence";
import { modeFromProto } from "@pi/common/rules/mode";
import type { Kafka, KafkaMessage } from "@pi/common/events/kafka";
import type { Logger } from "@pi/common/runtime/logger";
import { checkSourceEvent, webhookBody, webhookEventId, type SourceEvent } from "./event-body.js";
import * as delivery from "./delivery-states.js";
import { queueEntry, type WebhookEventDoc, type WebhookStore } from "./store.js";

export function webhookEventDoc(
  src: SourceEvent,
  mode: WebhookEventDoc["mode"],
  now: Date,
  seq: number,
  trace?: Record<string, string>,
): WebhookEventDoc {
  const id = webhookEventId(src.sourceEventId);
  return {
    _id: id,
    sourceEventId: src.sourceEventId,
    partnerId: src.partnerId,
    connectionId: src.connectionId,
    mode,
    type: src.type,
    body: webhookBody(id, src),
    createdAt: now,
    seq,
    ...delivery.stored(now),
    ...(trace && Object.keys(trace).length > 0 ? { trace } : {}),
  };
}

/**
 * Stores webhook events, due at once, each with its queue entry. One already stored (redelivered) keeps its
 * document; if still pending, its entry is put back in case a crash came between the two inserts.
 */
export async function storeWebhookEvents(store: WebhookStore, docs: WebhookEventDoc[]): Promise<void> {
  const seen = new Set((await insertNew(store.events, docs)).map((d) => d._id));
  const entries = docs.filter((d) => !seen.has(d._id)).map(queueEntry);
  for (const id of seen) {
    const existing = await store.events.findOne({ _id: id });
    if (existing && existing.state === "pending") entries.push(queueEntry(existing));
  }
  await insertNew(store.queue, entries);
}

/** The webhook event of one Kafka message, or null (logged) for a message that can never make one. */
export function decodeMessage(
  message: KafkaMessage,
  where: { partition: number },
  logger: Logger,
  now: Date,
): WebhookEventDoc | null {
  const at = { ...where, offset: message.offset };
  if (!message.value) {
    logger.error(at, "empty connection event skipped");
    return null;
  }
  let event: eventsv1.ConnectionEvent;
  try {
    event = fromBinary(eventsv1.ConnectionEventSchema, message.value);
  } catch (err) {
    logger.error({ ...at, err }, "unreadable connection event skipped");
    return null;
  }
  const src = checkSourceEvent(event, now.getTime());
  if (!src.ok) {
    logger.error({ ...at, sourceEventId: event.eventId, reason: src.reason }, "connection event skipped");
    return null;
  }
  return webhookEventDoc(
    src,
    modeFromProto(event.mode) ?? "live",
    now,
    Number(message.offset),
    traceHeaders(contextFromHeaders(message.headers)),
  );
}

/**
 * The connection-events topic, a batch at a time: offsets are committed once eachBatch returns (at least once);
 * a database failure reads the batch again, a message that can never make an event is logged and skipped.
 */
export function consumeConnectionEvents(
  store: WebhookStore,
  kafka: Kafka,
  namespace: string,
  logger: Logger,
  onStored: () => void,
): Promise<Consuming> {
  return consume({
    kafka,
    logger,
    group: consumerGroup(namespace, "webhook"),
    topic: topicName(namespace, "connectionEvents"),
    name: "connection-events",
    // A replica that dies hands its partitions over within seconds, not the default 30.
    quickHandover: true,
    partitionsConsumedConcurrently: 3,
    async eachBatch(messages, partition) {
      const now = new Date();
      const docs = messages
        .map((m) => decodeMessage(m, { partition }, logger, now))
        .filter((d): d is WebhookEventDoc => d !== null);
      await storeWebhookEvents(store, docs);
      logger.debug({ partition, messages: messages.length, events: docs.length }, "connection events stored");
      if (docs.length > 0) onStored();
    },
  });
}
