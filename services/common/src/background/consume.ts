import type { Consumer, Kafka, KafkaMessage } from "kafkajs";
import { atMost } from "../at-most.js";
import type { Logger } from "../logger.js";
import { kafkaConsumerLag, messageProcessDuration, messagesConsumed, readAtScrape } from "../metrics.js";

// The one Kafka consumer of every service (consume): its set-up, its liveness (a consumer kafkajs
// gave up on makes the service not ready), its lag gauge, its metrics, and its bounded stop.

/**
 * How long a consumer's fetch waits at the broker while there is nothing to read. A fetch returns
 * as soon as a message arrives (minBytes 1), so a longer wait costs no latency: it only sets how
 * often an idle consumer wakes up (and how long a disconnect may wait for the fetch in flight).
 * kafkajs heartbeats between fetches, so a group member learns of a rebalance within about this
 * long plus CONSUMER_HEARTBEAT_MS.
 */
export const CONSUMER_MAX_WAIT_MS = 3_000;
let consumerMaxWaitMs = CONSUMER_MAX_WAIT_MS;

/**
 * Test seam: the fetch wait of the consumers this process creates from now on. The in-process test
 * stacks (test/support/services.ts) shorten it, so that stopping a stack does not wait out each
 * service's fetch in flight (a stack took 8 s to stop, most of it in its consumers' disconnects).
 */
export function setConsumerMaxWaitForTests(ms: number): void {
  consumerMaxWaitMs = ms;
}

/**
 * Group consumers that must hand their partitions over quickly when a replica dies (webhook, audit)
 * use this session timeout instead of kafkajs's 30 s, heartbeating at a third of it.
 */
export const CONSUMER_SESSION_TIMEOUT_MS = 10_000;
export const CONSUMER_HEARTBEAT_MS = 3_000;

/**
 * How long a stopping process waits for a consumer to leave its group. With the broker gone (every
 * pod of a release stops at once on uninstall, Kafka with them) kafkajs retries its connection for
 * half a minute before the consumer stops, past the 15 s a process gives itself to stop
 * (run-service.ts). Offsets it did not commit are read again by whoever takes its partitions over.
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

/**
 * Whether a consumer still runs. kafkajs restarts a consumer after a retriable crash; one it does
 * not restart is gone for good, and the service must say so in its readiness instead of silently
 * no longer consuming.
 */
export function watchConsumer(consumer: Pick<Consumer, "on" | "events">, name: string, logger: Logger): () => boolean {
  let alive = true;
  consumer.on(consumer.events.CRASH, (event) => {
    if (event.payload.restart) return;
    alive = false;
    logger.error({ consumer: name, err: event.payload.error }, "Kafka consumer stopped for good; reporting not ready");
  });
  return () => alive;
}

/**
 * Runs a consumer's handler of `count` messages of `topic` and counts them once it succeeds
 * (messaging_client_consumed_messages_total, and messaging_process_duration_seconds: the time
 * divided among them). A handler that throws counts nothing: kafkajs reads its messages again.
 */
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
 * Sets pi_kafka_consumer_lag{group} at each scrape (readAtScrape) from the broker's offsets (the
 * group's committed ones and the topic's ends), with the service's own Kafka user: its group READ
 * grant lets it read its own groups' offsets. Every replica of the group reports the same value.
 * The admin client connects at the first scrape.
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
  /** The consumer group (consumerGroup(namespace, service, ...)). */
  group: string;
  topic: string;
  /** What logs call it ("audit-events"). */
  name: string;
  /**
   * Handles one message; or `eachBatch`, a partition's batch at once. Offsets are committed only
   * once it returns, so what it stored before is stored before its offset is committed (at least
   * once); a throw has kafkajs read the message (the batch) again.
   */
  each?(message: KafkaMessage, partition: number): Promise<void>;
  eachBatch?(messages: KafkaMessage[], partition: number): Promise<void>;
  /**
   * Members that share the topic and must hand their partitions over quickly when one dies
   * (CONSUMER_SESSION_TIMEOUT_MS instead of kafkajs's 30 s).
   */
  quickHandover?: boolean;
  partitionsConsumedConcurrently?: number;
  /** Where a group without committed offsets starts: the beginning (default) or the end. */
  fromBeginning?: boolean;
  /** false: no offsets committed (a group of one process that places itself with `startAt`). */
  commit?: boolean;
  /** Offsets to read from, set once the consumer runs. */
  startAt?: { partition: number; offset: string }[];
  /** Reports pi_kafka_consumer_lag{group} (watchConsumerLag); true by default. */
  reportLag?: boolean;
}

export interface Consuming {
  /** False once kafkajs has given up on the consumer: the service reports not ready. */
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
