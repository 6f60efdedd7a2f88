import type { Consumer, Kafka, KafkaMessage } from "kafkajs";
import { atMost } from "../at-most.js";
import type { Logger } from "../logger.js";
import { kafkaConsumerLag, messageProcessDuration, messagesConsumed, readAtScrape } from "../metrics.js";

// The one Kafka consumer of every service: set-up, liveness, lag gauge, metrics and a bounded stop.

/**
 * How long a fetch waits at the broker while there is nothing to read. A fetch returns as soon as a
 * message arrives, so this sets only how often an idle consumer wakes (and a member learns of a
 * rebalance within about this plus CONSUMER_HEARTBEAT_MS).
 */
export const CONSUMER_MAX_WAIT_MS = 3_000;
let consumerMaxWaitMs = CONSUMER_MAX_WAIT_MS;

/** Test seam: in-process test stacks shorten the fetch wait, so that a stop waits out no fetch in flight. */
export function setConsumerMaxWaitForTests(ms: number): void {
  consumerMaxWaitMs = ms;
}

/** For groups that must hand partitions over quickly when a replica dies, instead of kafkajs's 30 s. */
export const CONSUMER_SESSION_TIMEOUT_MS = 10_000;
export const CONSUMER_HEARTBEAT_MS = 3_000;

/**
 * How long a stopping process waits for a consumer to leave its group: with the broker gone kafkajs
 * retries for half a minute, past the 15 s a process has to stop. Uncommitted offsets are read again.
 */
export const CONSUMER_STOP_MS = 4_000;

/** Disconnects a consumer, waiting CONSUMER_STOP_MS at most. */
export async function disconnectConsumer(
  consumer: Pick<Consumer, "disconnect">,
  name: string,
  logger: Logger,
  ms = CONSUMER_STOP_MS,
): Promise<void> {
  const disconnected = consumer
    .disconnect()
    .catch((err: unknown) =>
      logger.warn({ consumer: name, err: (err as Error).message }, "Kafka consumer did not disconnect cleanly"),
    );
  if (!(await atMost(disconnected, ms)))
    logger.warn({ consumer: name, waitedMs: ms }, "Kafka consumer still stopping; left behind");
}

/** Whether a consumer still runs: one kafkajs does not restart after a crash makes the service not ready. */
export function watchConsumer(consumer: Pick<Consumer, "on" | "events">, name: string, logger: Logger): () => boolean {
  let alive = true;
  consumer.on(consumer.events.CRASH, (event) => {
    if (event.payload.restart) return;
    alive = false;
    logger.error({ consumer: name, err: event.payload.error }, "Kafka consumer stopped for good; reporting not ready");
  });
  return () => alive;
}

/** Runs a handler of `count` messages and counts them (and their share of its time) once it succeeds. */
export async function consumed<T>(topic: string, count: number, handle: () => Promise<T>): Promise<T> {
  const started = performance.now();
  const result = await handle();
  if (count > 0) {
    const each = (performance.now() - started) / 1000 / count;
    messagesConsumed.inc({ messaging_destination_name: topic }, count);
    for (let i = 0; i < count; i++) messageProcessDuration.observe({ messaging_destination_name: topic }, each);
  }
  return result;
}

/** Messages a group has yet to consume: per partition its end offset less the group's committed one (from the start when none), summed. */
export function consumerLag(
  ends: { partition: number; high: string; low: string }[],
  committed: { partition: number; offset: string }[],
): number {
  const at = new Map(committed.map((c) => [c.partition, Number(c.offset)]));
  return ends.reduce((sum, end) => {
    const position = at.get(end.partition) ?? -1;
    return sum + Math.max(0, Number(end.high) - (position < 0 ? Number(end.low) : position));
  }, 0);
}

/**
 * Sets pi_kafka_consumer_lag{group} at each scrape from the broker's offsets, as the service's own
 * Kafka user (its group READ grant covers its groups' offsets); the admin client connects at the first.
 */
export function watchConsumerLag(
  kafka: Kafka,
  groupId: string,
  topic: string,
  logger: Logger,
): { stop(): Promise<void> } {
  const admin = kafka.admin();
  let connected: Promise<void> | undefined;
  const reads = readAtScrape(
    [kafkaConsumerLag],
    async () => {
      connected ??= admin.connect().catch((err: unknown) => {
        connected = undefined;
        throw err;
      });
      await connected;
      const [offsets] = await admin.fetchOffsets({ groupId, topics: [topic] });
      const ends = await admin.fetchTopicOffsets(topic);
      kafkaConsumerLag.set({ group: groupId }, consumerLag(ends, offsets?.partitions ?? []));
    },
    logger,
  );
  return {
    async stop() {
      await reads.stop();
      if (connected !== undefined)
        await atMost(
          admin.disconnect().catch(() => undefined),
          CONSUMER_STOP_MS,
        );
    },
  };
}

export interface ConsumeOptions {
  kafka: Kafka;
  logger: Logger;
  group: string;
  topic: string;
  /** What logs call it ("audit-events"). */
  name: string;
  /** One message, or (`eachBatch`) a partition's batch; offsets are committed once it returns, a throw reads it again. */
  each?(message: KafkaMessage, partition: number): Promise<void>;
  eachBatch?(messages: KafkaMessage[], partition: number): Promise<void>;
  /** CONSUMER_SESSION_TIMEOUT_MS instead of kafkajs's 30 s. */
  quickHandover?: boolean;
  partitionsConsumedConcurrently?: number;
  /** Where a group without committed offsets starts: the beginning by default. */
  fromBeginning?: boolean;
  /** false: no offsets committed (a group of one process that places itself with `startAt`). */
  commit?: boolean;
  /** Offsets to read from, set once the consumer runs. */
  startAt?: { partition: number; offset: string }[];
  /** Reports pi_kafka_consumer_lag{group}; true by default. */
  reportLag?: boolean;
}

export interface Consuming {
  alive(): boolean;
  /** Leaves the group, waiting for the message (batch) in hand, CONSUMER_STOP_MS at most. */
  stop(): Promise<void>;
}

/** Joins `group` and reads `topic`, counting each message handled (consumed) and, by default, the group's lag. */
export async function consume(o: ConsumeOptions): Promise<Consuming> {
  const { kafka, logger, group, topic, name } = o;
  if (!o.each === !o.eachBatch) throw new TypeError("consume: give each or eachBatch");
  const consumer = kafka.consumer({
    groupId: group,
    maxWaitTimeInMs: consumerMaxWaitMs,
    ...(o.quickHandover
      ? { sessionTimeout: CONSUMER_SESSION_TIMEOUT_MS, heartbeatInterval: CONSUMER_HEARTBEAT_MS }
      : {}),
  });
  const alive = watchConsumer(consumer, name, logger);
  const lag = o.reportLag === false ? undefined : watchConsumerLag(kafka, group, topic, logger);
  const stop = async () => void (await Promise.all([lag?.stop(), disconnectConsumer(consumer, name, logger)]));
  try {
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: o.fromBeginning ?? true });
    const { each, eachBatch } = o;
    await consumer.run({
      autoCommit: o.commit ?? true,
      ...(o.partitionsConsumedConcurrently ? { partitionsConsumedConcurrently: o.partitionsConsumedConcurrently } : {}),
      ...(each
        ? { eachMessage: ({ message, partition }) => consumed(topic, 1, () => each(message, partition)) }
        : {
            eachBatch: async ({ batch, heartbeat }) => {
              await consumed(topic, batch.messages.length, () => eachBatch!(batch.messages, batch.partition));
              await heartbeat();
            },
          }),
    });
  } catch (err) {
    await stop();
    throw err;
  }
  for (const { partition, offset } of o.startAt ?? []) consumer.seek({ topic, partition, offset });
  return { alive, stop };
}
