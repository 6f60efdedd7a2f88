import type { Collection, Document, Filter, UpdateFilter, WithId } from "mongodb";
import type { Producer } from "./kafka.js";
import { atMost } from "./at-most.js";
import { newId } from "./ids.js";
import type { Logger } from "./logger.js";
import { messagesSent, outboxOldestUnrelayedAge, readAtScrape } from "./metrics.js";
import { every, type Periodic } from "./background/periodic.js";
import { endLease, leaseFree, takeLease, type LeaseFields } from "./background/lease.js";
import { contextFromHeaders, inSpan, SpanKind, traceHeaders } from "./telemetry.js";

// The one persistence toolkit of every service. MongoDB (and the local mongo-java-server) gives no
// multi-document transactions and no change streams, but makes each single-document write atomic.
// Everything here rests on that alone, so any number of replicas of a service stay correct: there
// are no in-process locks anywhere (docs/engineering.md, "Persistence").

// The collections are typed by the callers; the filters and updates built here name fields
// generically, which the driver's types cannot check.
type AnyCollection<T extends Document> = Collection<T>;
const asFilter = <T extends Document>(f: Document) => f as Filter<T>;
const asUpdate = <T extends Document>(u: Document) => u as UpdateFilter<T>;

// ---------------------------------------------------------------- duplicate keys and inserts

/** True for a write refused because its _id or a unique index key is taken (E11000). */
export function isDuplicateKey(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === 11000;
}

/** Inserts the document unless its _id (or a unique key) is taken; true when this call inserted it. */
export async function insertIfNew<T extends Document>(collection: AnyCollection<T>, doc: T): Promise<boolean> {
  try {
    await collection.insertOne(doc as never);
    return true;
  } catch (err) {
    if (isDuplicateKey(err)) return false;
    throw err;
  }
}

/** Inserts every document; returns those not inserted because their _id or unique key is taken. */
export async function insertNew<T extends Document>(collection: AnyCollection<T>, docs: T[]): Promise<T[]> {
  if (docs.length === 0) return [];
  try {
    await collection.insertMany(docs as never, { ordered: false });
    return [];
  } catch (err) {
    const writeErrors = (err as { writeErrors?: { code: number; index: number }[] | { code: number; index: number } })
      .writeErrors;
    const list = Array.isArray(writeErrors) ? writeErrors : writeErrors ? [writeErrors] : [];
    if (list.length === 0 || list.some((e) => e.code !== 11000)) throw err;
    return list.map((e) => docs[e.index]!);
  }
}

// ---------------------------------------------------------------- versioned update

export interface Versioned {
  _id: string;
  /** Bumped by every versioned update: the compare-and-set guard. */
  version: number;
}

/**
 * Check-and-set: applies `update` (and bumps `version`) only if the document still has the version
 * that was read. null when another writer got there first: read again and decide again.
 */
export function updateVersioned<T extends Versioned>(
  collection: AnyCollection<T>,
  read: Pick<T, "_id" | "version">,
  update: UpdateFilter<T>,
): Promise<WithId<T> | null> {
  const inc = { ...((update.$inc as Document | undefined) ?? {}), version: 1 };
  return collection.findOneAndUpdate(
    asFilter<T>({ _id: read._id, version: read.version }),
    asUpdate<T>({ ...update, $inc: inc }),
    { returnDocument: "after" },
  );
}

// ---------------------------------------------------------------- the outbox

/** An event written in the same document update as the state change it reports. */
export interface OutboxEntry {
  eventId: string;
  occurredAt: Date;
  /** Trace headers of the state change: the publication, and what consumers do, join its trace. */
  trace?: Record<string, string>;
}

/** A document that carries an outbox: events not yet published, and the relay's lease. */
export interface OutboxFields<E extends OutboxEntry = OutboxEntry> {
  outbox: E[];
  relayUntil?: Date | null;
  relayHolder?: string | null;
}

/** The fields of a new document with nothing to publish (spread into an insert). */
export const emptyOutbox = (): OutboxFields<never> => ({ outbox: [], relayUntil: null, relayHolder: null });

/** A new outbox entry: a fresh event id, the time, and the active trace context. */
export function outboxEntry<F extends object>(fields: F, occurredAt = new Date()): F & OutboxEntry {
  const trace = traceHeaders();
  return { ...fields, eventId: newId("evt"), occurredAt, ...(Object.keys(trace).length > 0 ? { trace } : {}) };
}

/** The update that stores `entry` with a state change: merge it into the change's update. */
export function pushEvent<E extends OutboxEntry>(entry: E): { $push: { outbox: E } } {
  return { $push: { outbox: entry } };
}

const RELAY: LeaseFields = { until: "relayUntil", holder: "relayHolder" };

/** Where one event went: its partition and offset on the topic. */
export interface Published {
  partition: number;
  offset: bigint;
}

export interface OutboxOptions<D extends Document, E extends OutboxEntry> {
  /** What the events are, for spans and logs ("connection events"). */
  name: string;
  collection: AnyCollection<D>;
  producer: Pick<Producer, "send">;
  topic: string;
  logger: Logger;
  /** The message key of a document's events: all of them share it, so they keep their order. */
  key(doc: WithId<D>): string;
  value(doc: WithId<D>, entry: E): Uint8Array;
  /** Headers of the message besides the trace headers. */
  headers?(entry: E): Record<string, string>;
  /** The event's name in its publish span ("publish connection.approved"); the outbox's name by default. */
  eventName?(entry: E): string;
  /** How long a relay may hold a document before another may publish its events again. */
  leaseMs?: number;
  sweepEveryMs?: number;
  /**
   * The array field that holds the entries, and the relay's lease fields: "outbox", "relayUntil" and
   * "relayHolder" by default. A document may carry several outboxes (its events, its audit records:
   * audit-trail.ts), each under its own names, relayed apart.
   */
  field?: string;
  lease?: LeaseFields;
  /** What logs name a document by (its _id by default): for documents whose _id must not be logged. */
  logId?(id: unknown): unknown;
}

/**
 * How long a stopping process waits for an outbox's relays in flight. With Kafka gone a publish
 * retries for half a minute, past the 15 s a process gives itself to stop (run-service.ts); what a
 * relay could not publish stays in its document, for the next sweep of any replica (at least once).
 */
export const RELAY_STOP_MS = 3_000;

/** Settles once every promise of the set has, including those added to it meanwhile. */
export async function settleAll(inFlight: Set<Promise<unknown>>): Promise<void> {
  while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
}

/**
 * The transactional outbox without transactions. A state change and its event are stored in ONE
 * document update (the entry is pushed into `outbox` with the new state), so both are stored or
 * neither is. A relay then takes the document's relay lease (one relay at a time per document,
 * across replicas, so events go out once and in order), publishes the entries, and only then pulls
 * them out. Relays run right after the write, in a periodic sweep, and at start; a crash anywhere
 * leaves the entries (and at worst a lease that runs out) for the next one: at least once,
 * deduplicated downstream on the event id.
 */
export class Outbox<D extends Document, E extends OutboxEntry> {
  private readonly leaseMs: number;
  private readonly field: string;
  private readonly lease: LeaseFields;
  private readonly logId: (id: unknown) => unknown;
  private readonly inFlight = new Set<Promise<unknown>>();
  private sweeper: Periodic | undefined;
  private ageGauge: { stop(): Promise<void> } | undefined;

  constructor(private readonly o: OutboxOptions<D, E>) {
    this.leaseMs = o.leaseMs ?? 30_000;
    this.field = o.field ?? "outbox";
    this.lease = o.lease ?? RELAY;
    this.logId = o.logId ?? ((id) => id);
  }

  /** The filter of documents holding at least one entry. */
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
    this.track(
      this.relay(id).catch((err: unknown) =>
        this.o.logger.warn(
          { err, id: this.logId(id), events: this.o.name },
          "outbox relay failed; the sweep will retry",
        ),
      ),
    );
  }

  /**
   * Publishes and removes the entries of one document, unless another relay holds it. Returns
   * where each event this call published went. Failures are logged, the lease given back, and the
   * entries left for the sweep.
   */
  async relay(id: unknown): Promise<Map<string, Published>> {
    const published = new Map<string, Published>();
    const { collection, logger } = this.o;
    // Each round: take the lease, publish what the document holds, then remove it and give the lease
    // back in one write. Entries written meanwhile (their own relay found the lease taken) are
    // found by the next round's take, which returns null once nothing is left.
    for (;;) {
      const lease = await takeLease(collection, asFilter<D>({ _id: id, ...this.pending() }), this.lease, {
        ms: this.leaseMs,
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

  /** Whether the event is still in the document's outbox (not published yet). */
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
    return pending.length;
  }

  /**
   * The age of the oldest entry not published yet, in seconds (0: none), as
   * pi_outbox_oldest_unrelayed_age_seconds{outbox}: an outbox that stopped relaying (Kafka down, a
   * relay failing) shows as an age that grows. Read by the sweep index; every replica reports the same.
   */
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

  /** Sweeps now (events a crash left behind) and then every `sweepEveryMs`; measures the oldest entry left at each scrape. */
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

  /** Waits for the relays in flight. */
  async drain(): Promise<void> {
    await settleAll(this.inFlight);
  }

  private track(p: Promise<unknown>): void {
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }
}
