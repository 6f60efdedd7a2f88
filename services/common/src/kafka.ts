import kafkajs, { Kafka, logLevel, Partitioners, type Admin, type Consumer, type Producer, type SASLOptions } from "kafkajs";
import { atMost } from "./at-most.js";
import type { Logger } from "./logger.js";
import { GAUGE_REFRESH_MS, kafkaConsumerLag, messageProcessDuration, messagesConsumed } from "./metrics.js";
import { every, type Periodic } from "./periodic.js";
import type { Settings } from "./settings.js";
import { TOPICS, topicConfig, topicName, type TopicKey } from "./topics.js";

export type { Kafka, Producer, Admin };

const levels: Record<number, "error" | "warn" | "info" | "debug"> = {
  [logLevel.ERROR]: "error",
  [logLevel.WARN]: "warn",
  [logLevel.INFO]: "info",
  [logLevel.DEBUG]: "debug",
};

/** A Kafka user's credentials (SASL/SCRAM, docs/security.md "Kafka"); none: an unauthenticated client. */
export interface KafkaCredentials {
  mechanism: "scram-sha-256" | "scram-sha-512";
  username: string;
  password: string;
  /** TLS to the brokers (the system's CAs and NODE_EXTRA_CA_CERTS). */
  ssl?: boolean;
}

/** A user of the brokers this project runs (npm start, the tests, the chart): SCRAM-SHA-256. */
export function scramUser(username: string, password: string): KafkaCredentials {
  return { mechanism: "scram-sha-256", username, password };
}

/** The credentials of KAFKA_USERNAME / KAFKA_PASSWORD; a service started without them connects unauthenticated (and a broker with ACLs refuses it). */
export function kafkaCredentials(settings: Pick<Settings, "KAFKA_USERNAME" | "KAFKA_PASSWORD" | "KAFKA_SASL_MECHANISM" | "KAFKA_SSL">): KafkaCredentials | undefined {
  if (!settings.KAFKA_USERNAME || !settings.KAFKA_PASSWORD) return undefined;
  return { mechanism: settings.KAFKA_SASL_MECHANISM, username: settings.KAFKA_USERNAME, password: settings.KAFKA_PASSWORD, ssl: settings.KAFKA_SSL };
}

export function createKafka(brokers: string, clientId: string, logger: Logger, credentials?: KafkaCredentials): Kafka {
  const log = logger.child({ component: "kafka" });
  return new Kafka({
    clientId,
    brokers: brokers.split(","),
    ...(credentials
      ? { sasl: { mechanism: credentials.mechanism, username: credentials.username, password: credentials.password } as SASLOptions, ssl: credentials.ssl ?? false }
      : {}),
    connectionTimeout: 3000,
    retry: { retries: 8, initialRetryTime: 200 },
    logLevel: logLevel.WARN,
    logCreator:
      () =>
      ({ level, log: entry }) => {
        const { message, ...rest } = entry;
        log[levels[level] ?? "info"](rest, message);
      },
  });
}

/**
 * How long a consumer's fetch waits at the broker while there is nothing to read. A fetch returns
 * as soon as a message arrives (minBytes 1), so a longer wait costs no latency: it only sets how
 * often an idle consumer wakes up (and how long a disconnect may wait for the fetch in flight).
 * kafkajs heartbeats between fetches, so a group member learns of a rebalance within about this
 * long plus CONSUMER_HEARTBEAT_MS.
 */
export const CONSUMER_MAX_WAIT_MS = 3_000;

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
export async function disconnectConsumer(consumer: Pick<Consumer, "disconnect">, name: string, logger: Logger, ms = CONSUMER_STOP_MS): Promise<void> {
  const disconnected = consumer.disconnect().catch((err: unknown) => logger.warn({ consumer: name, err: (err as Error).message }, "Kafka consumer did not disconnect cleanly"));
  if (!(await atMost(disconnected, ms))) logger.warn({ consumer: name, waitedMs: ms }, "Kafka consumer still stopping; left behind");
}

export function createProducer(kafka: Kafka): Producer {
  return kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
}

/**
 * Creates every declared topic that is missing and waits until each has a leader. Safe to call
 * from every service at start; retried, because a broker that has just started may still refuse
 * ("This server does not host this topic-partition") while its metadata settles.
 */
/**
 * Creates the namespace's topics that are missing, each with its retention (topics.ts). With
 * `configureExisting` (Kafka's super user only: the local stack and kafka-setup), also sets that
 * retention on topics that exist, so a topic created before it was declared gets it.
 */
export async function ensureTopics(
  kafka: Kafka,
  namespace: string,
  keys: TopicKey[] = Object.keys(TOPICS) as TopicKey[],
  attempts = 8,
  opts: { configureExisting?: boolean } = {},
): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        const existing = new Set(await admin.listTopics());
        const missing = keys.filter((k) => !existing.has(topicName(namespace, k)));
        if (missing.length > 0) {
          await admin.createTopics({
            waitForLeaders: true,
            // No replication factor: the broker's default.replication.factor applies (1 locally, 3 in a cluster).
            topics: missing.map((k) => ({ topic: topicName(namespace, k), numPartitions: TOPICS[k].partitions, configEntries: topicConfig(k) })),
          });
        }
        if (opts.configureExisting) {
          await admin.alterConfigs({
            validateOnly: false,
            resources: keys.map((k) => ({ type: kafkajs.ConfigResourceTypes.TOPIC, name: topicName(namespace, k), configEntries: topicConfig(k) })),
          });
        }
        await admin.fetchTopicMetadata({ topics: keys.map((k) => topicName(namespace, k)) });
        return;
      } catch (err) {
        if (attempt >= attempts) throw err;
        await new Promise((r) => setTimeout(r, 250 * attempt));
      }
    }
  } finally {
    await admin.disconnect();
  }
}

/**
 * Runs `attempt` again (after 250 ms, 500 ms, ...) while the broker refuses it with an error kafkajs
 * marks retriable: a topic created a moment ago may still answer "This server is not the leader for
 * that topic-partition" while its metadata settles.
 */
export async function whileMetadataSettles<T>(attempt: () => Promise<T>, attempts = 8): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (n >= attempts || (err as { retriable?: unknown }).retriable !== true) throw err;
      await new Promise((r) => setTimeout(r, 250 * n));
    }
  }
}

/** True when a broker answers a metadata request within the timeout. */
export async function kafkaReachable(admin: Admin, timeoutMs = 2000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      admin.describeCluster(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("timeout")), timeoutMs);
      }),
    ]);
    return true;
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
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
export function consumerLag(ends: { partition: number; high: string; low: string }[], committed: { partition: number; offset: string }[]): number {
  const at = new Map(committed.map((c) => [c.partition, Number(c.offset)]));
  return ends.reduce((sum, end) => {
    const position = at.get(end.partition) ?? -1;
    return sum + Math.max(0, Number(end.high) - (position < 0 ? Number(end.low) : position));
  }, 0);
}

/**
 * Sets pi_kafka_consumer_lag{group} every GAUGE_REFRESH_MS from the broker's offsets (the group's
 * committed ones and the topic's ends), with the service's own Kafka user: its group READ grant
 * lets it read its own groups' offsets. Every replica of the group reports the same value.
 */
export function watchConsumerLag(kafka: Kafka, groupId: string, topic: string, logger: Logger): Periodic {
  const admin = kafka.admin();
  let connected: Promise<void> | undefined;
  const round = every(
    `consumer lag of ${groupId}`,
    GAUGE_REFRESH_MS,
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
    runNow: round.runNow,
    async stop() {
      await round.stop();
      if (connected) await atMost(admin.disconnect().catch(() => undefined), CONSUMER_STOP_MS);
    },
  };
}
