import { randomUUID } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import { consume, type Consuming } from "../background/consume.js";
import { every, type Periodic } from "../background/periodic.js";
import { topicOffsets, whileMetadataSettles, type Kafka } from "./kafka.js";
import type { Logger } from "../runtime/logger.js";
import { consumerGroup, topicName } from "./topics.js";

// The one way a cache of partner state stays honest (docs/authentication.md, "Revocation"): a gateway's
// revocation list and an auth replica's cache of authentications follow the partner-events topic and
// report how far they applied it; auth holds an operator's change until every live follower has it.

/** How often a follower reports its position even when no event arrived. */
export const FOLLOWER_HEARTBEAT_MS = 5_000;

/** A follower that has not reported for this long is taken for dead: no operator's change waits for it. */
export const FOLLOWER_LIVENESS_MS = 15_000;

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
  private readonly reports: Periodic;
  /** performance.now() when the last report that succeeded was started; -Infinity before any. */
  private lastStoredAt = -Infinity;

  constructor(
    private readonly send: SendPosition,
    logger: Logger,
    heartbeatMs = FOLLOWER_HEARTBEAT_MS,
  ) {
    const report = async () => {
      const started = performance.now();
      await this.send(Object.fromEntries(this.nextOffsets), false);
      this.lastStoredAt = started;
    };
    this.reports = every("reporting the partner-events position", heartbeatMs, report, logger, { runAtStart: false });
  }

  /** Moves a partition's position forward (never back); resolves once it (or a later one) was reported or failed. */
  advance(partition: number, nextOffset: bigint): Promise<void> {
    if (nextOffset > (this.nextOffsets.get(partition) ?? -1n)) this.nextOffsets.set(partition, nextOffset);
    return this.reports.runNow();
  }

  /** How long ago the last successful report started (what the store holds is at least that fresh). */
  sinceLastReportMs(): number {
    return performance.now() - this.lastStoredAt;
  }

  async stop(): Promise<void> {
    await this.reports.stop();
    await this.send({}, true).catch(() => undefined);
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
  /** Called with this instance's id; must store the position where the auth service reads it. */
  sendPosition(instanceId: string): SendPosition;
  /**
   * Runs after the topic's end has been read and before the topic is followed from there: a
   * snapshot of the state every earlier event produced (the database write precedes each event).
   */
  catchUp?(): Promise<void>;
}

export interface PartnerEventFeed {
  /**
   * Whether state derived from the events may be served: the consumer runs, no event is being
   * applied, and the last report is recent enough that an operator's change waits for this follower.
   */
  trusted(): boolean;
  stop(): Promise<void>;
}

/**
 * Follows the partner-events topic from its end. The end offsets are read first, then `catchUp`
 * runs, then the topic is read from those offsets: nothing is missed and nothing old is replayed.
 * Each instance reads with a group of its own (no committed offsets), so every instance sees every
 * event; each event is applied before the position past it is reported. Resolves once the first
 * report has been tried (when it succeeded, the auth service waits for this instance from then on).
 */
export async function followPartnerEvents(options: PartnerEventFeedOptions): Promise<PartnerEventFeed> {
  const { kafka, namespace, logger } = options;
  const topic = topicName(namespace, "partnerEvents");
  const ends = await kafka.withAdmin((admin) => whileMetadataSettles(() => topicOffsets(admin, topic)));
  let applying = false;

  await options.catchUp?.();

  const instanceId = randomUUID();
  const reporter = new PositionReporter(options.sendPosition(instanceId), logger);
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
      startAt: ends,
      async each(message, partition) {
        if (message.value) {
          applying = true;
          try {
            await options.apply(fromBinary(eventsv1.PartnerEventSchema, message.value));
          } catch (err) {
            logger.error({ err }, "unreadable partner event skipped");
          } finally {
            applying = false;
          }
        }
        void reporter.advance(partition, BigInt(message.offset) + 1n);
      },
    });
  } catch (err) {
    await reporter.stop();
    throw err;
  }
  // Placed at the end: where no event was read yet, that is the position.
  await Promise.all(ends.map(({ partition, offset }) => reporter.advance(partition, BigInt(offset))));
  return {
    trusted: () =>
      consuming.alive() && !applying && reporter.sinceLastReportMs() < FOLLOWER_LIVENESS_MS - FOLLOWER_HEARTBEAT_MS,
    async stop() {
      await consuming.stop();
      await reporter.stop();
    },
  };
}
