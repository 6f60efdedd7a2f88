import kafkajs, { Kafka, logLevel, Partitioners, type Admin, type Producer, type SASLOptions } from "kafkajs";
import { atMost } from "./at-most.js";
import { retry } from "./background/retry.js";
import type { Logger } from "./logger.js";
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
export function kafkaCredentials(
  settings: Pick<Settings, "KAFKA_USERNAME" | "KAFKA_PASSWORD" | "KAFKA_SASL_MECHANISM" | "KAFKA_SSL">,
): KafkaCredentials | undefined {
  if (!settings.KAFKA_USERNAME || !settings.KAFKA_PASSWORD) return undefined;
  return {
    mechanism: settings.KAFKA_SASL_MECHANISM,
    username: settings.KAFKA_USERNAME,
    password: settings.KAFKA_PASSWORD,
    ssl: settings.KAFKA_SSL,
  };
}

export function createKafka(brokers: string, clientId: string, logger: Logger, credentials?: KafkaCredentials): Kafka {
  const log = logger.child({ component: "kafka" });
  return new Kafka({
    clientId,
    brokers: brokers.split(","),
    ...(credentials
      ? {
          sasl: {
            mechanism: credentials.mechanism,
            username: credentials.username,
            password: credentials.password,
          } as SASLOptions,
          ssl: credentials.ssl ?? false,
        }
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

export function createProducer(kafka: Kafka): Producer {
  return kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
}

/**
 * Creates the namespace's topics that are missing, each with its retention (topics.ts). With
 * `configureExisting` (Kafka's super user only: the local stack and kafka-setup), also sets that
 * retention on topics that exist, so a topic created before it was declared gets it. Safe to call
 * from every service at start; retried (backing off to 2 s), because a broker that has just started
 * may still refuse ("This server does not host this topic-partition") while its metadata settles.
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
    await retry(
      "creating the topics",
      async () => {
        const existing = new Set(await admin.listTopics());
        const missing = keys.filter((k) => !existing.has(topicName(namespace, k)));
        if (missing.length > 0) {
          await admin.createTopics({
            waitForLeaders: true,
            // No replication factor: the broker's default.replication.factor applies (1 locally, 3 in a cluster).
            topics: missing.map((k) => ({
              topic: topicName(namespace, k),
              numPartitions: TOPICS[k].partitions,
              configEntries: topicConfig(k),
            })),
          });
        }
        if (opts.configureExisting) {
          await admin.alterConfigs({
            validateOnly: false,
            resources: keys.map((k) => ({
              type: kafkajs.ConfigResourceTypes.TOPIC,
              name: topicName(namespace, k),
              configEntries: topicConfig(k),
            })),
          });
        }
        await admin.fetchTopicMetadata({ topics: keys.map((k) => topicName(namespace, k)) });
      },
      { attempts, firstDelayMs: 250, maxDelayMs: 2_000 },
    );
  } finally {
    await admin.disconnect();
  }
}

/**
 * Runs `attempt` again (after 250 ms, 500 ms, ... up to 2 s) while the broker refuses it with an error kafkajs
 * marks retriable: a topic created a moment ago may still answer "This server is not the leader for
 * that topic-partition" while its metadata settles.
 */
export function whileMetadataSettles<T>(attempt: () => Promise<T>, attempts = 8): Promise<T> {
  return retry("reading topic metadata", attempt, {
    attempts,
    firstDelayMs: 250,
    maxDelayMs: 2_000,
    retryIf: (err) => (err as { retriable?: unknown }).retriable === true,
  });
}

/** True when a broker answers a metadata request within the timeout. */
export async function kafkaReachable(admin: Admin, timeoutMs = 2000): Promise<boolean> {
  const answered = admin.describeCluster().then(
    () => true,
    () => false,
  );
  return (await atMost(answered, timeoutMs)) && (await answered);
}
