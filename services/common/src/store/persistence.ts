import { type Collection, type Document, MongoBulkWriteError, type UpdateFilter, type WithId } from "mongodb";
import type { Producer } from "../events/kafka.js";
import { atMost } from "../rules/at-most.js";
import { newId } from "../rules/ids.js";
import type { Logger } from "../runtime/logger.js";
import { messagesSent, outboxOldestUnrelayedAge, readAtScrape } from "../runtime/metrics.js";
import { every, type Periodic } from "../background/periodic.js";
import { asFilter, asUpdate, endLease, leaseFree, takeLease, type LeaseFields } from "../background/lease.js";
import { contextFromHeaders, inSpan, SpanKind, traceHeaders } from "../runtime/telemetry.js";

// The persistence toolkit of every service. MongoDB (and mongo-java-server) gives no multi-document
// transactions and no change streams, only atomic single-document writes: everything here rests on
// that alone, with no in-process locks, so any number of replicas stay correct (docs/engineering.md).

/** True for a write refused because its _id or a unique index key is taken (E11000). */
export function isDuplicateKey(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === 11000;
}

/** Inserts the document unless its _id (or a unique key) is taken; true when this call inserted it. */
export async function insertIfNew<T extends Document>(collection: Collection<T>, doc: T): Promise<boolean> {
  return (await insertNew(collection, [doc])).length === 0;
}

/** Inserts the documents whose _id (or unique key) is free; the ones refused as taken. */
export async function insertNew<T extends Document>(collection: Collection<T>, docs: T[]): Promise<T[]> {
  if (docs.length === 0) return [];
  try {
    await collection.insertMany(docs as never, { ordered: false });
    return [];
  } catch (err) {
    const refused = err instanceof MongoBulkWriteError ? [err.writeErrors].flat() : [];
    if (refused.length === 0 || refused.some((e) => e.code !== 11000)) throw err;
    return refused.map((e) => docs[e.index]!);
  }
}

/** Applies `update` (bumping `version`) only if the document still has the version read; else null. */
export function updateVersioned<T extends { _id: string; version: number }>(
  collection: Collection<T>,
  read: Pick<T, "_id" | "version">,
  update: UpdateFilter<T>,
): Promise<WithId<T> | null> {
  return collection.findOneAndUpdate(
    asFilter<T>({ _id: read._id, version: read.version }),
    asUpdate<T>({ ...update, $inc: { ...(update.$inc as Document | undefined), version: 1 } }),
    { returnDocument: "after" },
  );
}

export interface OutboxEntry {
  eventId: string;
  occurredAt: Date;
  /** Trace headers of the state change: the publication, and what consumers do, join its trace. */
  trace?: Record<string, string>;
}

export interface OutboxFields<E extends OutboxEntry = OutboxEntry> {
  outbox: E[];
  relayUntil?: Date | null;
  relayHolder?: string | null;
}

/** The fields of a new document with nothing to publish (spread into an insert). */
export const emptyOutbox = (): OutboxFields<never> => ({ outbox: [], relayUntil: null, relayHolder: null });

export function outboxEntry<F extends object>(fields: F, occurredAt = new Date()): F & OutboxEntry {
  const trace = traceHeaders();
  return { ...fields, eventId: newId("evt"), occurredAt, ...(Object.keys(trace).length > 0 ? { trace } : {}) };
}

export interface Published {
  partition: number;
  offset: bigint;
}

export interface OutboxOptions<D extends Document, E extends OutboxEntry> {
  name: string;
  collection: Collection<D>;
  producer: Pick<Producer, "send">;
  topic: string;
  logger: Logger;
  /** The message key of a document's events: all of them share it, so they keep their order. */
  key(doc: WithId<D>): string;
  value(doc: WithId<D>, entry: E): Uint8Array;
  headers?(entry: E): Record<string, string>;
  /** The event's name in its publish span ("publish connection.approved"); the outbox's name by default. */
  eventName?(entry: E): string;
  sweepEveryMs?: number;
  /** The entries' array and the relay's lease fields, for a document that carries several outboxes (audit.ts). */
  field?: string;
  lease?: LeaseFields;
  /** Documents that exist only to carry entries: deleted once relayed. */
  dropEmpty?: boolean;
  /** What logs name a document by (its _id by default): for documents whose _id must not be logged. */
  logId?(id: unknown): unknown;
}

/**
 * How long a stopping process waits for an outbox's relays in flight: a publish with Kafka gone
 * retries past the 15 s a process has to stop. What was not published stays for the next sweep.
 */
export const RELAY_STOP_MS = 3_000;

/** How long a relay may hold a document before another may publish its events again. */
const RELAY_LEASE_MS = 30_000;

/**
 * The transactional outbox without transactions: a state change and its event are ONE document
 * update. A relay takes the document's relay lease (one relay per document across replicas, so
 * events go out once and in order), publishes the entries, and only then pulls them out. Relays run
 * right after the write, in a periodic sweep and at start; a crash anywhere leaves the entries for
 * the next one: at least once, deduplicated downstream on the event id.
 */
export class Outbox<D extends Document, E extends OutboxEntry> {
  private readonly field: string;
  private readonly lease: LeaseFields;
  private readonly logId: (id: unknown) => unknown;
  private readonly inFlight = new Set<Promise<unknown>>();
  private sweeper: Periodic | undefined;
  private ageGauge: { stop(): Promise<void> } | undefined;

  constructor(private readonly o: OutboxOptions<D, E>) {
    this.field = o.field ?? "outbox";
    this.lease = o.lease ?? { until: "relayUntil", holder: "relayHolder" };
    this.logId = o.logId ?? ((id) => id);
  }

  private pending(): Document {
    return { [`${this.field}.eventId`]: { $exists: true } };
  }

  /** The index the sweep reads: only documents with entries have a key in it. */
  async ensureIndex(): Promise<void> {
    await this.o.collection.createIndex(
      { [`${this.field}.eventId`]: 1 },
      { sparse: true, name: `${this.field}_pending` },
    );
  }

  /** Right after a write that stored an entry: relays in the background; a failure is left to the sweep. */
  afterWrite(id: unknown): void {
    const failed = (err: unknown) =>
      this.o.logger.warn({ err, id: this.logId(id), events: this.o.name }, "outbox relay failed; the sweep will retry");
    const relaying = this.relay(id).catch(failed);
    this.inFlight.add(relaying);
    void relaying.finally(() => this.inFlight.delete(relaying));
  }

  /** Publishes and pulls the entries of one document unless another relay holds it; where each went. */
  async relay(id: unknown): Promise<Map<string, Published>> {
    const published = new Map<string, Published>();
    const { collection, logger } = this.o;
    // Entries written meanwhile (their own relay found the lease taken) are taken by the next round.
    for (;;) {
      const lease = await takeLease(collection, asFilter<D>({ _id: id, ...this.pending() }), this.lease, {
        ms: RELAY_LEASE_MS,
      });
      if (!lease) return published;
      const entries = (lease.doc as Document)[this.field] as E[];
      try {
        await this.publish(lease.doc, entries, published);
      } catch (err) {
        logger.warn({ err, id: this.logId(id), events: this.o.name }, "outbox relay failed; the sweep will retry");
        await endLease(collection, id, this.lease, lease.holder).catch(() => undefined);
        return published;
      }
      const ended = await endLease(collection, id, this.lease, lease.holder, {
        update: asUpdate<D>({ $pull: { [this.field]: { eventId: { $in: entries.map((e) => e.eventId) } } } }),
      });
      if (!ended) return published; // the lease ran out and another relay took over (and publishes again)
      if (this.o.dropEmpty) await collection.deleteOne(asFilter<D>({ _id: id, [this.field]: { $size: 0 } }));
    }
  }

  private async publish(doc: WithId<D>, entries: E[], published: Map<string, Published>): Promise<void> {
    const key = this.o.key(doc);
    const messages = await Promise.all(
      entries.map((entry) =>
        // A PRODUCER span in the state change's trace; its headers travel with the message.
        inSpan(
          `publish ${this.o.eventName?.(entry) ?? this.o.name}`,
          { kind: SpanKind.PRODUCER, parent: contextFromHeaders(entry.trace) },
          async () => ({
            key,
            value: Buffer.from(this.o.value(doc, entry)),
            headers: { ...traceHeaders(), ...this.o.headers?.(entry) },
          }),
        ),
      ),
    );
    const [meta] = await this.o.producer.send({ topic: this.o.topic, messages });
    messagesSent.inc({ messaging_destination_name: this.o.topic }, messages.length);
    // One key, so one partition: the entries sit at consecutive offsets from the batch's base.
    if (meta)
      for (const [i, e] of entries.entries())
        published.set(e.eventId, { partition: meta.partition, offset: BigInt(meta.baseOffset ?? "0") + BigInt(i) });
    this.o.logger.info({ id: this.logId(doc._id), events: entries.map((e) => e.eventId) }, `${this.o.name} published`);
  }

  async holds(id: unknown, eventId: string): Promise<boolean> {
    return (
      (await this.o.collection.countDocuments(asFilter<D>({ _id: id, [`${this.field}.eventId`]: eventId }), {
        limit: 1,
      })) > 0
    );
  }

  /** Relays every document that has entries and no relay at work on it; returns how many it found. */
  async sweep(limit = 500): Promise<number> {
    const pending = await this.o.collection
      .find(asFilter<D>({ ...this.pending(), ...leaseFree(this.lease, new Date()) }), { projection: { _id: 1 } })
      .limit(limit)
      .toArray();
    await Promise.all(pending.map((d) => this.relay(d._id)));
    if (this.o.dropEmpty) await this.o.collection.deleteMany(asFilter<D>({ [this.field]: { $size: 0 } }));
    return pending.length;
  }

  /** The age of the oldest entry not published yet, in seconds (0: none): pi_outbox_oldest_unrelayed_age_seconds{outbox}. */
  async oldestUnrelayedAgeSeconds(now = new Date()): Promise<number> {
    const oldest = await this.o.collection
      .find(asFilter<D>(this.pending()), { projection: { [`${this.field}.occurredAt`]: 1 } })
      .sort({ [`${this.field}.occurredAt`]: 1 })
      .limit(1)
      .toArray();
    const entries = ((oldest[0] as Document | undefined)?.[this.field] ?? []) as { occurredAt?: Date }[];
    const first = Math.min(...entries.map((e) => (e.occurredAt instanceof Date ? e.occurredAt.getTime() : Infinity)));
    return Number.isFinite(first) ? Math.max(0, (now.getTime() - first) / 1000) : 0;
  }

  /** Sweeps now and every `sweepEveryMs`; measures the oldest entry at each scrape. */
  start(): void {
    this.sweeper ??= every(
      `${this.o.name} outbox sweep`,
      this.o.sweepEveryMs ?? 5_000,
      () => this.sweep(),
      this.o.logger,
    );
    // Named by where the entries wait ("connections.outbox", "connections.audit"): one per outbox.
    const outbox = `${this.o.collection.collectionName}.${this.field}`;
    this.ageGauge ??= readAtScrape(
      [outboxOldestUnrelayedAge],
      async () => outboxOldestUnrelayedAge.set({ outbox }, await this.oldestUnrelayedAgeSeconds()),
      this.o.logger,
    );
  }

  /** Stops the sweep and waits for the sweep and relays in flight, RELAY_STOP_MS at most. */
  async stop(): Promise<void> {
    if (!(await atMost(Promise.all([this.sweeper?.stop(), this.ageGauge?.stop(), this.drain()]), RELAY_STOP_MS))) {
      this.o.logger.warn(
        { events: this.o.name, waitedMs: RELAY_STOP_MS },
        "relays still publishing at stop; their events stay stored for the next sweep",
      );
    }
  }

  async drain(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }
}
