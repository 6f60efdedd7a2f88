import { randomUUID } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import { atMost } from "./at-most.js";
import { consume, CONSUMER_MAX_WAIT_MS, type Consuming } from "./background/consume.js";
import { every, type Periodic } from "./background/periodic.js";
import { whileMetadataSettles, type Kafka } from "./kafka.js";
import type { Logger } from "./logger.js";
import { consumerGroup, topicName } from "./topics.js";

// The partner-events topic followed by every instance that keeps state derived from partners and
// credentials in memory (a gateway's revocation list, an auth replica's cache of authentications,
// a webhook replica's cache of targets), and the position each reports so that the auth service
// can hold an operator's change until every live follower has applied it
// (services/auth/src/propagation.ts). A follower the auth service does not wait for (webhook
// replicas) reports nothing.

/** How often a follower reports its position even when no event arrived. */
export const FOLLOWER_HEARTBEAT_MS = 5_000;

/**
 * A follower's fetch waits at the broker as long as every consumer's (CONSUMER_MAX_WAIT_MS): an event
 * still arrives at once (the broker answers a waiting fetch as soon as it is written), and a stop may
 * wait that long for the fetch in flight. Each follower is the only member of its group, so no
 * rebalance waits on it.
 */
export const FOLLOWER_MAX_WAIT_MS = CONSUMER_MAX_WAIT_MS;

/**
 * The topic's end is read every `readEndEveryMs` only while `caughtUp` was asked within this long:
 * a replica nobody asks for tokens reads nothing (it read twice a second, idle or not).
 */
export const END_READ_IDLE_AFTER_MS = 10_000;

/**
 * How long `readEndIfStale` waits for a read of an end too old to trust; past it the caller goes
 * on, and `caughtUp` answers false (what the cache would have served comes from the database).
 * While reads fail or hang (Kafka unreachable) it does not wait at all.
 */
export const END_READ_WAIT_MS = 250;

/** Partition of the partner-events topic to the offset of the next event the follower will apply. */
export type NextOffsets = Record<number, bigint>;

/** Stores a follower's position, or (leaving) forgets the follower. */
export type SendPosition = (nextOffsets: NextOffsets, leaving: boolean) => Promise<void>;

/**
 * Reports how far a follower has applied the partner-events topic: at once when it moves (one
 * report in flight at a time, later moves coalesced) and as a heartbeat.
 */
export class PositionReporter {
  private readonly nextOffsets = new Map<number, bigint>();
  private inFlight?: Promise<void>;
  private again = false;
  private readonly heartbeat: Periodic;
  /** performance.now() when the last report that succeeded was started; -Infinity before any. */
  private lastStoredAt = -Infinity;

  constructor(
    private readonly send: SendPosition,
    private readonly logger: Logger,
    heartbeatMs = FOLLOWER_HEARTBEAT_MS,
  ) {
    this.heartbeat = every("reporting the partner-events position", heartbeatMs, async () => this.kick(), logger, {
      runAtStart: false,
    });
  }

  advance(partition: number, nextOffset: bigint): void {
    this.nextOffsets.set(partition, nextOffset);
    this.kick();
  }

  /** Resolves once the report in flight (and any coalesced after it) has been sent. */
  async flush(): Promise<void> {
    while (this.inFlight !== undefined) await this.inFlight;
  }

  /** How long ago the last successful report started (what the store holds is at least that fresh). */
  sinceLastReportMs(now = performance.now()): number {
    return now - this.lastStoredAt;
  }

  kick(): void {
    if (this.inFlight !== undefined) {
      this.again = true;
      return;
    }
    const started = performance.now();
    this.inFlight = this.send(Object.fromEntries(this.nextOffsets), false)
      .then(
        () => {
          this.lastStoredAt = started;
        },
        (err: unknown) =>
          this.logger.warn({ err: (err as Error).message }, "reporting the partner-events position failed"),
      )
      .finally(() => {
        this.inFlight = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  async stop(): Promise<void> {
    await this.heartbeat.stop();
    await this.inFlight;
    await this.send({}, true).catch(() => undefined);
  }
}

const endsOf = (offsets: { partition: number; offset: string }[]): Map<number, bigint> =>
  new Map(offsets.map((e) => [e.partition, BigInt(e.offset)]));

/** The end of the topic as last read: partition to the offset the next event written will take. */
export interface LogEnd {
  ends: ReadonlyMap<number, bigint>;
  /** performance.now() when the read that found them started. */
  readAt: number;
}

/**
 * Whether a follower has applied every event the topic held when its end was last read, and that
 * read is at most `maxAgeMs` old: the trust a follower may put in state derived from the events (an
 * auth replica's cache of authentications) rests on the position applied, not on a heartbeat. A
 * follower whose consumer is stuck sees the end move past it at the next read and stops trusting.
 */
export function appliedThroughEnd(
  applied: ReadonlyMap<number, bigint>,
  end: LogEnd | undefined,
  now: number,
  maxAgeMs: number,
): boolean {
  if (!end || now - end.readAt > maxAgeMs) return false;
  for (const [partition, offset] of end.ends) if ((applied.get(partition) ?? -1n) < offset) return false;
  return true;
}

/**
 * The topic's end as this follower knows it, read on demand: every `everyMs` (`round`) while it was
 * asked within END_READ_IDLE_AFTER_MS, and at once (`readIfStale`) when it is too old to trust.
 * `trusts` is appliedThroughEnd against the end last read, which is trusted for three periods.
 */
export class TopicEndWatch {
  private askedAt: number;
  private reading?: Promise<void>;
  private readStartedAt = 0;
  private lastReadFailed = false;
  private readonly maxAgeMs: number;

  constructor(
    private end: LogEnd,
    private readonly readEnd: () => Promise<ReadonlyMap<number, bigint>>,
    everyMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.askedAt = now();
    this.maxAgeMs = 3 * everyMs;
  }

  /** Whether every event up to the end last read has been applied, that read being recent enough. */
  trusts(applied: ReadonlyMap<number, bigint>): boolean {
    this.askedAt = this.now();
    return appliedThroughEnd(applied, this.end, this.askedAt, this.maxAgeMs);
  }

  /** The periodic read: none when nobody asked for END_READ_IDLE_AFTER_MS. */
  async round(): Promise<void> {
    if (this.now() - this.askedAt > END_READ_IDLE_AFTER_MS) return;
    await this.read();
  }

  /**
   * Reads the end when the last read is too old to trust, waiting END_READ_WAIT_MS at most; not at
   * all while the last read failed or the one under way has already taken longer (Kafka is not
   * answering: the request goes on without the cache at once, as it did before reads were on demand).
   */
  async readIfStale(): Promise<void> {
    this.askedAt = this.now();
    if (this.askedAt - this.end.readAt <= this.maxAgeMs) return;
    const hung = this.reading !== undefined && this.askedAt - this.readStartedAt > END_READ_WAIT_MS;
    const reading = this.read();
    if (this.lastReadFailed || hung) reading.catch(() => undefined);
    else await atMost(reading, END_READ_WAIT_MS);
  }

  /** One read at a time: a caller arriving during a read waits for that one. */
  private read(): Promise<void> {
    this.reading ??= (async () => {
      try {
        const readAt = this.now();
        this.readStartedAt = readAt;
        this.end = { ends: await this.readEnd(), readAt };
        this.lastReadFailed = false;
      } catch (err) {
        this.lastReadFailed = true;
        throw err;
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }
}

export interface PartnerEventFeedOptions {
  kafka: Kafka;
  namespace: string;
  /** The following service's name, for the consumer group. */
  service: string;
  logger: Logger;
  /** Applies one event; the position past it is reported only once a returned promise settles. */
  apply(event: eventsv1.PartnerEvent): void | Promise<void>;
  /**
   * Called with this instance's id; must store the position where the auth service reads it.
   * Without it the instance reports nothing and the auth service does not wait for it.
   */
  sendPosition?(instanceId: string): SendPosition;
  /**
   * Runs after the topic's end has been read and before the topic is followed from there: a
   * snapshot of the state every earlier event produced (the database write precedes each event).
   */
  catchUp?(): Promise<void>;
  /**
   * Reads the topic's end this often while `caughtUp` is being asked (END_READ_IDLE_AFTER_MS), for
   * `caughtUp`: its answer is false when the last successful read is older than three periods.
   * Without it `caughtUp` is always false.
   */
  readEndEveryMs?: number;
}

export interface PartnerEventFeed {
  readonly instanceId: string;
  /** Undefined when the follower reports nothing (no `sendPosition`). */
  readonly reporter: PositionReporter | undefined;
  /** False once the consumer has stopped for good (consume.ts: a failure that cannot pass). */
  alive(): boolean;
  /** Whether every event up to the topic's end as last read (recently) has been applied (appliedThroughEnd). */
  caughtUp(): boolean;
  /**
   * Reads the topic's end now when the last read is too old for `caughtUp` (a replica that was not
   * asked for a while reads nothing), waiting END_READ_WAIT_MS at most; awaited before `caughtUp`.
   */
  readEndIfStale(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Follows the partner-events topic from its end. The end offsets are read first, then `catchUp`
 * runs, then the topic is read from those offsets: nothing is missed and nothing old is replayed.
 * Each instance reads with a group of its own (no committed offsets), so every instance sees every
 * event; each event is applied before the position past it is reported. Resolves once the first
 * report has been tried (when it succeeded, the auth service waits for this instance from then on),
 * or without `sendPosition` once the consumer is placed at the end.
 */
export async function followPartnerEvents(options: PartnerEventFeedOptions): Promise<PartnerEventFeed> {
  const { kafka, namespace, logger } = options;
  const topic = topicName(namespace, "partnerEvents");
  const admin = kafka.admin();
  await admin.connect();
  let ends: { partition: number; offset: string }[];
  const startedAt = performance.now();
  try {
    ends = await whileMetadataSettles(() => admin.fetchTopicOffsets(topic));
  } finally {
    await admin.disconnect();
  }
  const applied = new Map<number, bigint>();
  const firstEnd: LogEnd = { ends: endsOf(ends), readAt: startedAt };

  await options.catchUp?.();

  const instanceId = randomUUID();
  const reporter = options.sendPosition ? new PositionReporter(options.sendPosition(instanceId), logger) : undefined;
  let consuming: Consuming;
  try {
    consuming = await consume({
      kafka,
      logger,
      group: consumerGroup(namespace, options.service, instanceId),
      topic,
      name: "partner-events",
      fromBeginning: false,
      commit: false,
      reportLag: false,
      startAt: ends,
      async each(message, partition) {
        if (message.value) {
          try {
            await options.apply(fromBinary(eventsv1.PartnerEventSchema, message.value));
          } catch (err) {
            logger.error({ err }, "unreadable partner event skipped");
          }
        }
        applied.set(partition, BigInt(message.offset) + 1n);
        reporter?.advance(partition, BigInt(message.offset) + 1n);
      },
    });
  } catch (err) {
    await reporter?.stop();
    throw err;
  }
  for (const { partition, offset } of ends) {
    if (applied.has(partition)) continue; // an event read already
    applied.set(partition, BigInt(offset));
    reporter?.advance(partition, BigInt(offset));
  }
  await reporter?.flush();
  let endReader: { watch: TopicEndWatch; periodic: Periodic; admin: ReturnType<Kafka["admin"]> } | undefined;
  if (options.readEndEveryMs) {
    const endAdmin = kafka.admin();
    await endAdmin.connect();
    const watch = new TopicEndWatch(
      firstEnd,
      async () => endsOf(await endAdmin.fetchTopicOffsets(topic)),
      options.readEndEveryMs,
    );
    endReader = {
      watch,
      admin: endAdmin,
      periodic: every("reading the partner-events end", options.readEndEveryMs, () => watch.round(), logger, {
        runAtStart: false,
      }),
    };
  }
  return {
    instanceId,
    reporter,
    alive: () => consuming.alive(),
    caughtUp: () => consuming.alive() && endReader?.watch.trusts(applied) === true,
    readEndIfStale: async () => endReader?.watch.readIfStale(),
    async stop() {
      await endReader?.periodic.stop();
      await endReader?.admin.disconnect().catch(() => undefined);
      await consuming.stop();
      await reporter?.stop();
    },
  };
}
