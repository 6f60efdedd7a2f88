import { setTimeout as sleep } from "node:timers/promises";
import type { Consumer, Message, MessagesStream } from "@platformatic/kafka";
import { atMost } from "../rules/at-most.js";
import { type Kafka, type KafkaMessage, kafkaMessage, retriable, topicOffsets } from "../events/kafka.js";
import type { Logger } from "../runtime/logger.js";
import { kafkaConsumerLag, messageProcessDuration, messagesConsumed, readAtScrape } from "../runtime/metrics.js";
import { retryDelay } from "./retry.js";

// The one Kafka consumer of every service: set-up, restarts, liveness, lag gauge, metrics and a bounded stop.

/**
 * How long a fetch waits at the broker while there is nothing to read. A fetch returns as soon as a
 * message arrives, so this sets only how often an idle consumer wakes.
 */
export const CONSUMER_MAX_WAIT_MS = 3_000;
let consumerMaxWaitMs = CONSUMER_MAX_WAIT_MS;

/** Test seam: in-process test stacks shorten the fetch wait, so that a stop waits out no fetch in flight. */
export function setConsumerMaxWaitForTests(ms: number): void {
  consumerMaxWaitMs = ms;
}

/** For groups that must hand partitions over quickly when a replica dies, instead of 30 s (as 1.0.0's members). */
export const CONSUMER_SESSION_TIMEOUT_MS = 10_000;
const GROUP = { sessionTimeout: 30_000, rebalanceTimeout: 60_000, heartbeatInterval: 3_000 };

/**
 * How long a stopping process waits for a consumer to leave its group: with the broker gone the client
 * retries past the 15 s a process has to stop. Uncommitted offsets are read again.
 */
export const CONSUMER_STOP_MS = 4_000;

/** Closes a consumer and its stream (it leaves its group), waiting CONSUMER_STOP_MS at most. */
export async function disconnectConsumer(
  consumer: { close(force?: boolean): Promise<void> },
  name: string,
  logger: Logger,
  ms = CONSUMER_STOP_MS,
): Promise<void> {
  const disconnected = consumer
    .close(true)
    .catch((err: unknown) =>
      logger.warn({ consumer: name, err: (err as Error).message }, "Kafka consumer did not disconnect cleanly"),
    );
  if (!(await atMost(disconnected, ms)))
    logger.warn({ consumer: name, waitedMs: ms }, "Kafka consumer still stopping; left behind");
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
  /** CONSUMER_SESSION_TIMEOUT_MS instead of 30 s. */
  quickHandover?: boolean;
  partitionsConsumedConcurrently?: number;
  /** Where a group without committed offsets starts: the beginning by default. */
  fromBeginning?: boolean;
  /** false: no offsets committed and no lag reported (a group of one process that places itself with `startAt`). */
  commit?: boolean;
  /** Offsets to read from (with `commit` false). */
  startAt?: { partition: number; offset: string }[];
}

export interface Consuming {
  /** False once the consumer has stopped for good (a failure trying again cannot cure): the service reports not ready. */
  alive(): boolean;
  /** Leaves the group, waiting for the message (batch) in hand, CONSUMER_STOP_MS at most. */
  stop(): Promise<void>;
}

/** A handler's throw, or a stream that ended: the consumer starts again and reads the messages again. */
class Restart extends Error {}

/** The messages a stream holds, by partition: one as soon as it arrives, with all that came with it. */
async function* batches(
  stream: MessagesStream<Buffer, Buffer, Buffer, Buffer>,
): AsyncGenerator<Map<number, Message[]>> {
  for await (const first of stream) {
    const byPartition = new Map<number, Message[]>();
    for (let m: Message | null = first; m !== null; m = stream.read()) {
      if (!byPartition.has(m.partition)) byPartition.set(m.partition, []);
      byPartition.get(m.partition)!.push(m);
    }
    yield byPartition;
  }
}

/**
 * Joins `group` and reads `topic`, counting each message handled (consumed) and, by default, the
 * group's lag. A partition's messages are handled in order, then its offset is committed. On a
 * failure that trying again may cure (a broker gone, a handler's throw) the consumer starts again
 * from the committed offsets (without commits: from where it was), backing off to 30 s.
 */
export async function consume(o: ConsumeOptions): Promise<Consuming> {
  const { kafka, logger, group, topic, name, each, eachBatch } = o;
  if (!each === !eachBatch) throw new TypeError("consume: give each or eachBatch");
  const commit = o.commit ?? true;
  const positions = new Map((o.startAt ?? []).map((s) => [s.partition, BigInt(s.offset)]));
  const fallbackMode = (o.fromBeginning ?? true) ? "earliest" : "latest";
  let alive = true;
  let stopping = false;
  let consumer: Consumer | undefined;
  let stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;

  const start = async () => {
    const c = kafka.consumer(group, {
      ...GROUP,
      maxWaitTime: consumerMaxWaitMs,
      ...(o.quickHandover ? { sessionTimeout: CONSUMER_SESSION_TIMEOUT_MS } : {}),
    });
    consumer = c;
    let s: MessagesStream<Buffer, Buffer, Buffer, Buffer> | undefined;
    // A failed rejoin: the stream ends with it and the consumer starts again.
    c.on("error", (err: Error) => s?.destroy(err));
    s = await c.consume({
      topics: [topic],
      fallbackMode,
      ...(commit || positions.size === 0
        ? { mode: "committed" }
        : { mode: "manual", offsets: [...positions].map(([partition, offset]) => ({ topic, partition, offset })) }),
    });
    stream = s;
    return s;
  };
  const labels = { messaging_destination_name: topic };
  const handle = async (partition: number, messages: Message[]) => {
    const started = performance.now();
    try {
      if (eachBatch) await eachBatch(messages.map(kafkaMessage), partition);
      else for (const m of messages) await each!(kafkaMessage(m), partition);
    } catch (err) {
      throw new Restart((err as Error).message, { cause: err });
    }
    messagesConsumed.inc(labels, messages.length);
    const share = (performance.now() - started) / 1000 / messages.length;
    for (const _ of messages) messageProcessDuration.observe(labels, share);
    const last = messages.at(-1)!;
    positions.set(partition, last.offset + 1n);
    // A commit refused (the partition moved to another member meanwhile) only means it reads them again.
    if (commit)
      await Promise.resolve(last.commit()).catch((err: unknown) =>
        logger.warn({ consumer: name, partition, err: (err as Error).message }, "Kafka offset not committed"),
      );
  };
  const run = async (first: MessagesStream<Buffer, Buffer, Buffer, Buffer>) => {
    for (let failures = 0, s: typeof first | undefined = first; !stopping; ) {
      try {
        s ??= await start();
        for await (const byPartition of batches(s)) {
          const partitions = [...byPartition.keys()];
          const at = o.partitionsConsumedConcurrently ?? 1;
          for (let i = 0; i < partitions.length; i += at)
            await Promise.all(partitions.slice(i, i + at).map((p) => handle(p, byPartition.get(p)!)));
          failures = 0;
        }
        if (!stopping) throw new Restart("the stream ended");
      } catch (err) {
        if (stopping) return;
        if (!(err instanceof Restart) && !retriable(err)) {
          alive = false;
          logger.error({ consumer: name, err }, "Kafka consumer stopped for good; reporting not ready");
          return;
        }
        logger.warn({ consumer: name, err: (err as Error).message }, "Kafka consumer failed; starting again");
        await disconnectConsumer(consumer!, name, logger);
        s = undefined;
        await sleep(retryDelay(++failures, { firstDelayMs: 300, maxDelayMs: 30_000 }));
      }
    }
  };

  // pi_kafka_consumer_lag{group} at each scrape, as the service's own Kafka user (its group READ grant covers its
  // offsets); a group that commits nothing has no lag to report.
  const admin = commit ? kafka.admin() : undefined;
  const lag =
    admin &&
    readAtScrape(
      [kafkaConsumerLag],
      async () => {
        const [offsets] = await admin.listConsumerGroupOffsets({ groups: [group] });
        const partitions = offsets?.topics.find((t) => t.name === topic)?.partitions ?? [];
        const committed = partitions.map((p) => ({ partition: p.partitionIndex, offset: String(p.committedOffset) }));
        kafkaConsumerLag.set({ group }, consumerLag(await topicOffsets(admin, topic), committed));
      },
      logger,
    );
  let running: Promise<void> | undefined;
  const stop = async () => {
    stopping = true;
    await atMost(Promise.all([stream?.close(), running]), CONSUMER_STOP_MS);
    await lag?.stop();
    await Promise.all([
      admin &&
        atMost(
          admin.close().catch(() => undefined),
          CONSUMER_STOP_MS,
        ),
      consumer && disconnectConsumer(consumer, name, logger),
    ]);
  };
  try {
    running = run(await start());
  } catch (err) {
    await stop();
    throw err;
  }
  return { alive: () => alive, stop };
}
