import { randomBytes } from "node:crypto";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { Producer } from "kafkajs";
import type { Collection, Document } from "mongodb";
import { createKafka, createProducer, ensureTopics, type Kafka } from "@pi/common/kafka";
import { createLogger } from "@pi/common/logger";
import { topicName } from "@pi/common/topics";
import { eventsv1 } from "@pi/proto";
import { testKafkaAdmin } from "./services.js";

// Reads the connection-events topic of one namespace from its beginning, for tests that check what
// the connection service published.

export interface CollectedEvent {
  key: string;
  partition: number;
  offset: string;
  event: eventsv1.ConnectionEvent;
}

export interface EventCollector {
  events: CollectedEvent[];
  /** Resolves once `predicate` holds for the events seen so far; rejects after `timeoutMs`. */
  waitFor(predicate: (events: CollectedEvent[]) => boolean, timeoutMs?: number): Promise<CollectedEvent[]>;
  /** Events of one connection, in topic order. */
  of(connectionId: string): eventsv1.ConnectionEvent[];
  /**
   * Publishes a marker with partition key `key` (a partner id, the key of its connections' events)
   * and resolves once it has been read: every event published with that key before this call has
   * been read too, so a test can then assert that some event never came. The marker names no
   * connection, so `of()` never returns it; a webhook service on the topic logs and skips it.
   */
  sentinel(key: string, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export async function collectConnectionEvents(brokers: string, namespace: string): Promise<EventCollector> {
  const kafka: Kafka = createKafka(brokers, `${namespace}.test-reader`, createLogger("test-reader", "error"), testKafkaAdmin());
  await ensureTopics(kafka, namespace, ["connectionEvents"]);
  const topic = topicName(namespace, "connectionEvents");
  const consumer = kafka.consumer({ groupId: `${namespace}.test-reader.${randomBytes(4).toString("hex")}`, maxWaitTimeInMs: 100 });
  const events: CollectedEvent[] = [];
  let producer: Producer | undefined;
  const waiters = new Set<() => void>();
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      events.push({
        key: message.key?.toString() ?? "",
        partition,
        offset: message.offset,
        event: fromBinary(eventsv1.ConnectionEventSchema, message.value ?? new Uint8Array()),
      });
      for (const wake of waiters) wake();
    },
  });
  return {
    events,
    waitFor(predicate, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!predicate(events)) return;
          cleanup();
          resolve(events);
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`timed out after ${timeoutMs} ms; events seen: ${JSON.stringify(events.map((e) => [e.event.type, e.event.connectionId]))}`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    of: (connectionId) => events.filter((e) => e.event.connectionId === connectionId).map((e) => e.event),
    async sentinel(key, timeoutMs) {
      if (!producer) {
        producer = createProducer(kafka);
        await producer.connect();
      }
      const eventId = `sentinel-${randomBytes(8).toString("hex")}`;
      const marker = create(eventsv1.ConnectionEventSchema, { eventId, type: "test.sentinel", partnerId: key });
      await producer.send({ topic, messages: [{ key, value: Buffer.from(toBinary(eventsv1.ConnectionEventSchema, marker)) }] });
      await this.waitFor((seen) => seen.some((e) => e.event.eventId === eventId), timeoutMs);
    },
    async stop() {
      await producer?.disconnect();
      await consumer.disconnect();
    },
  };
}

/**
 * Resolves once every event that changes of these connections would publish has been read: each
 * stored connection's outbox is empty (its events published, or none to publish), then a sentinel
 * on its partner's partition has come back. After it, "no event for X" is a fact, not a hope.
 */
export async function settled(collector: EventCollector, connections: Collection<Document>, ...ids: string[]): Promise<void> {
  const partners = new Set<string>();
  for (const id of ids) {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const doc = await connections.findOne({ _id: id as never }, { projection: { partnerId: 1, outbox: 1 } });
      if (!doc) throw new Error(`no stored connection ${id}`);
      if (!(doc.outbox as unknown[] | undefined)?.length) {
        partners.add(doc.partnerId as string);
        break;
      }
      if (Date.now() > deadline) throw new Error(`the outbox of ${id} was not relayed within 30 s`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  for (const key of partners) await collector.sentinel(key);
}
