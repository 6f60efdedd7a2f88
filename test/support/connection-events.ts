import { randomBytes } from "node:crypto";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { Producer } from "@pi/common/events/kafka";
import type { Collection, Document } from "mongodb";
import { eventsv1 } from "@pi/proto";
import { readTopic } from "./topic-reader.js";

// Reads the connection-events topic of one namespace from its beginning (topic-reader.ts), for tests
// that check what the connection service published.

export interface CollectedEvent {
  key: string;
  partition: number;
  offset: string;
  event: eventsv1.ConnectionEvent;
}

export interface EventCollector {
  readonly events: CollectedEvent[];
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
  const reader = await readTopic(
    brokers,
    namespace,
    "connectionEvents",
    (value) => fromBinary(eventsv1.ConnectionEventSchema, value),
    {
      describe: (e) => [e.type, e.connectionId],
    },
  );
  const collected = (): CollectedEvent[] => reader.records.map(({ value, ...at }) => ({ ...at, event: value }));
  let producer: Producer | undefined;
  return {
    get events() {
      return collected();
    },
    async waitFor(predicate, timeoutMs) {
      await reader.waitFor(() => predicate(collected()), timeoutMs);
      return collected();
    },
    of: (connectionId) => reader.records.filter((r) => r.value.connectionId === connectionId).map((r) => r.value),
    async sentinel(key, timeoutMs) {
      if (!producer) {
        producer = reader.kafka.producer();
      }
      const eventId = `sentinel-${randomBytes(8).toString("hex")}`;
      const marker = create(eventsv1.ConnectionEventSchema, { eventId, type: "test.sentinel", partnerId: key });
      await producer.send({
        topic: reader.topic,
        messages: [{ key, value: Buffer.from(toBinary(eventsv1.ConnectionEventSchema, marker)) }],
      });
      await reader.waitFor((records) => records.some((r) => r.value.eventId === eventId), timeoutMs);
    },
    async stop() {
      await producer?.disconnect();
      await reader.stop();
    },
  };
}

/**
 * Resolves once every event that changes of these connections would publish has been read: each
 * stored connection's outbox is empty (its events published, or none to publish), then a sentinel
 * on its partner's partition has come back. After it, "no event for X" is a fact, not a hope.
 */
export async function settled(
  collector: EventCollector,
  connections: Collection<Document>,
  ...ids: string[]
): Promise<void> {
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
