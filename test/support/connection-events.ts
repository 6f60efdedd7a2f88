import { randomBytes } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { createKafka, createLogger, ensureTopics, topicName, type Kafka } from "@pi/common";
import { eventsv1 } from "@pi/proto";

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
  stop(): Promise<void>;
}

export async function collectConnectionEvents(brokers: string, namespace: string): Promise<EventCollector> {
  const kafka: Kafka = createKafka(brokers, `${namespace}.test-reader`, createLogger("test-reader", "error"));
  await ensureTopics(kafka, namespace, ["connectionEvents"]);
  const topic = topicName(namespace, "connectionEvents");
  const consumer = kafka.consumer({ groupId: `${namespace}.test-reader.${randomBytes(4).toString("hex")}`, maxWaitTimeInMs: 100 });
  const events: CollectedEvent[] = [];
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
    stop: () => consumer.disconnect(),
  };
}
