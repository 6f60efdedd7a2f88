import { create, toBinary } from "@bufbuild/protobuf";
import type { Collection } from "mongodb";
import type { Producer } from "kafkajs";
import { commonv1, eventsv1 } from "@pi/proto";
import { KeyedLock, contextFromHeaders, inSpan, SpanKind, traceHeaders, type Logger } from "@pi/common";
import type { ConnectionDoc, OutboxEntry } from "./store.js";

// The transactional outbox without transactions. A state change and its event are written in ONE
// document update (the entry is $push-ed into `outbox` together with the new status), so either
// both are stored or neither is. The relay then publishes the document's entries to Kafka and only
// afterwards removes them, so a crash anywhere in between leaves the entries in place and the next
// relay (right after the next write, or the periodic sweep, which also runs at start) publishes
// them again: at least once, deduplicated downstream on event_id.
//
// Entries are removed with $pullAll on the exact entry values read: FerretDB v1 ignores $pull with
// a condition ({ eventId: ... }) but matches whole values, which identify an entry just as well
// because each carries its unique event id.

const { ConnectionEventSchema } = eventsv1;

/** The one test-only fault-injection switch (not an operator setting): see docs/connections.md. */
export const FAULT_ENV = "CONNECTION_FAULT_AFTER_STORE";

export function connectionEvent(doc: Pick<ConnectionDoc, "_id" | "partnerId" | "mode">, entry: OutboxEntry): eventsv1.ConnectionEvent {
  return create(ConnectionEventSchema, {
    eventId: entry.eventId,
    type: entry.type,
    partnerId: doc.partnerId,
    connectionId: doc._id,
    status: entry.status,
    mode: doc.mode === "test" ? commonv1.Mode.TEST : commonv1.Mode.LIVE,
    occurredAt: BigInt(entry.occurredAt.getTime()),
  });
}

export class OutboxRelay {
  // Connections being relayed by this process, and those written to again meanwhile (relayed once
  // more when the running pass ends), so one process never publishes a document's entries twice
  // at the same time.
  private readonly running = new Map<string, Promise<void>>();
  private readonly again = new Set<string>();
  private readonly fault = process.env[FAULT_ENV];

  constructor(
    private readonly connections: Collection<ConnectionDoc>,
    private readonly producer: Producer,
    private readonly topic: string,
    private readonly logger: Logger,
    // Shared with Connections: removing entries is a write of the connection document too.
    private readonly lock: KeyedLock = new KeyedLock(),
  ) {}

  /** Called right after a write that stored an outbox entry; never throws (the sweep retries). */
  afterStore(connectionId: string): void {
    if (this.fault === "exit") {
      // Fault injection: die between the database write and the publish, as a crash would.
      this.logger.warn({ connectionId, [FAULT_ENV]: this.fault }, "fault injection: killing the process before the publish");
      process.kill(process.pid, "SIGKILL");
    }
    void this.relay(connectionId);
  }

  /** Publishes and removes the outbox entries of one connection. */
  relay(connectionId: string): Promise<void> {
    const current = this.running.get(connectionId);
    if (current) {
      this.again.add(connectionId);
      return current;
    }
    const pass = (async () => {
      try {
        do {
          this.again.delete(connectionId);
          await this.publish(connectionId);
        } while (this.again.has(connectionId));
      } catch (err) {
        this.logger.warn({ err, connectionId }, "outbox relay failed; the sweep will retry");
      } finally {
        this.running.delete(connectionId);
      }
    })();
    this.running.set(connectionId, pass);
    return pass;
  }

  /** Relays every connection that still has entries; returns how many it found. */
  async sweep(limit = 500): Promise<number> {
    const pending = await this.connections
      .find({ "outbox.eventId": { $exists: true } }, { projection: { _id: 1 } })
      .limit(limit)
      .toArray();
    await Promise.all(pending.map((d) => this.relay(d._id)));
    return pending.length;
  }

  /** Waits for the relays in flight (for a clean stop). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.running.values()]);
  }

  private async publish(connectionId: string): Promise<void> {
    const doc = await this.connections.findOne({ _id: connectionId }, { projection: { partnerId: 1, mode: 1, outbox: 1 } });
    const entries = doc?.outbox ?? [];
    if (!doc || entries.length === 0) return;
    const messages = await Promise.all(
      entries.map((entry) =>
        // A PRODUCER span in the state change's trace; its headers travel with the message.
        inSpan(`publish ${entry.type}`, { kind: SpanKind.PRODUCER, parent: contextFromHeaders(entry.trace) }, async () => ({
          key: doc.partnerId,
          value: Buffer.from(toBinary(ConnectionEventSchema, connectionEvent(doc, entry))),
          headers: { ...traceHeaders(), "event-type": entry.type },
        })),
      ),
    );
    await this.producer.send({ topic: this.topic, messages });
    await this.lock.run(connectionId, () => this.connections.updateOne({ _id: connectionId }, { $pullAll: { outbox: entries } }));
    this.logger.info({ connectionId, events: entries.map((e) => ({ eventId: e.eventId, type: e.type })) }, "connection events published");
  }
}
