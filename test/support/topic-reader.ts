import { randomBytes } from "node:crypto";
import { consume } from "@pi/common/background/consume";
import { createKafka, ensureTopics, type Kafka, type KafkaCredentials, topicOffsets } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { topicName, type TopicKey } from "@pi/common/events/topics";
import { testKafkaAdmin } from "./services.js";
import { Waiters } from "./waiters.js";

// Reads one topic of one namespace from its beginning, in a consumer group of its own, for tests
// that check what a service published: every record decoded, a wait for a condition on them, and a
// wait for the topic's end as it stands, after which "this record is not on the topic" is a fact.

export interface ReadRecord<T> {
  key: string;
  partition: number;
  offset: string;
  value: T;
}

export interface TopicReader<T> {
  readonly kafka: Kafka;
  readonly topic: string;
  /** Every record read so far, in the order read. */
  readonly records: ReadRecord<T>[];
  /** Resolves once `predicate` holds for the records read so far; rejects after `timeoutMs`. */
  waitFor(predicate: (records: ReadRecord<T>[]) => boolean, timeoutMs?: number): Promise<ReadRecord<T>[]>;
  /** Resolves once every record the topic holds now (its end offsets, read now) has been read; rejects after `timeoutMs`. */
  readToEnd(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface ReadTopicOptions<T> {
  /** The Kafka user to read as (the test admin by default). */
  credentials?: KafkaCredentials;
  /** What a timeout's message shows of each record. */
  describe?: (value: T) => unknown;
}

export async function readTopic<T>(
  brokers: string,
  namespace: string,
  key: TopicKey,
  decode: (value: Uint8Array) => T,
  options: ReadTopicOptions<T> = {},
): Promise<TopicReader<T>> {
  const logger = createLogger("test-reader", "error");
  const kafka = createKafka(brokers, `${namespace}.test-reader`, logger, options.credentials ?? testKafkaAdmin());
  // The topic exists before the reader subscribes: a reader that found no such topic would see it
  // only at its next metadata refresh.
  await ensureTopics(kafka, namespace, [key]);
  const topic = topicName(namespace, key);
  const records: ReadRecord<T>[] = [];
  const readUpTo = new Map<number, bigint>();
  const waiters = new Waiters();
  const describe = options.describe ?? ((value: T) => value);
  const consuming = await consume({
    kafka,
    logger,
    group: `${namespace}.test-reader.${randomBytes(4).toString("hex")}`,
    topic,
    name: "test-reader",
    commit: false,
    each: async (message, partition) => {
      records.push({
        key: message.key?.toString() ?? "",
        partition,
        offset: message.offset,
        value: decode(message.value ?? new Uint8Array()),
      });
      readUpTo.set(partition, BigInt(message.offset) + 1n);
      waiters.wake();
    },
  });

  const waitUntil = (holds: () => boolean, timeoutMs: number, what: () => string) =>
    waiters.until(
      holds,
      timeoutMs,
      () =>
        new Error(
          `timed out after ${timeoutMs} ms waiting for ${what()}; records read: ${JSON.stringify(
            records.map((r) => describe(r.value)),
            (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v),
          )}`,
        ),
    );

  return {
    kafka,
    topic,
    records,
    async waitFor(predicate, timeoutMs = 30_000) {
      await waitUntil(
        () => predicate(records),
        timeoutMs,
        () => "a condition on the records",
      );
      return records;
    },
    async readToEnd(timeoutMs = 30_000) {
      const admin = kafka.admin();
      let ends: { partition: number; high: string; low: string }[];
      try {
        ends = await topicOffsets(admin, topic);
      } finally {
        await admin.close();
      }
      await waitUntil(
        () => ends.every((e) => (readUpTo.get(e.partition) ?? BigInt(e.low)) >= BigInt(e.high)),
        timeoutMs,
        () =>
          `${topic} read to its end ${JSON.stringify(ends)} (read up to ${JSON.stringify(Object.fromEntries([...readUpTo].map(([p, o]) => [p, String(o)])))})`,
      );
    },
    async stop() {
      await consuming.stop();
    },
  };
}
