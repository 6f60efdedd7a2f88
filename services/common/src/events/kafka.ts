import {
  Admin,
  ConfigResourceTypes,
  Consumer,
  compatibilityPartitioner,
  ListOffsetTimestamps,
  ProduceAcks,
  Producer as KafkaProducer,
  type BaseOptions,
  type GenericError,
  type Message,
  type SASLMechanismValue,
} from "@platformatic/kafka";
import { atMost } from "../rules/at-most.js";
import { retry } from "../background/retry.js";
import type { Logger } from "../runtime/logger.js";
import type { Settings } from "../runtime/settings.js";
import { TOPICS, topicConfig, topicName, type TopicKey } from "./topics.js";

// The seam to @platformatic/kafka: the few operations the services use, with kafkajs's shapes
// (offsets as strings, headers as a record), which the previous release used and its callers kept.
// The library logs nothing (unless DEBUG names it): each client made here logs a broker it cannot reach.

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

/** A message as consumers see it. */
export interface KafkaMessage {
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, Buffer>;
  offset: string;
}

export function kafkaMessage(m: Message): KafkaMessage {
  return {
    key: m.key ?? null,
    value: m.value ?? null,
    headers: Object.fromEntries([...m.headers].map(([k, v]) => [k.toString(), v])),
    offset: String(m.offset),
  };
}

export interface OutgoingMessage {
  key: string | Buffer;
  value: Buffer;
  headers?: Record<string, string | Buffer | undefined>;
}

/** A topic's partitions: `offset` (= `high`) the end, `low` the first offset still kept. */
export type TopicOffsets = { partition: number; offset: string; high: string; low: string }[];

/** Connection settings; each admin, producer and consumer made from them has connections of its own. */
export class Kafka {
  constructor(
    readonly options: BaseOptions,
    private readonly logger: Logger,
  ) {}

  private logged<C extends Admin | KafkaProducer | Consumer>(client: C): C {
    client.on("client:broker:failed", ({ broker }: { broker: { host: string; port: number } }) =>
      this.logger.warn({ broker: `${broker.host}:${broker.port}` }, "Kafka broker unreachable"),
    );
    return client;
  }

  admin(): Admin {
    return this.logged(new Admin(this.options));
  }

  /** Runs `task` with an admin client of its own, closed once it settles. */
  async withAdmin<T>(task: (admin: Admin) => Promise<T>): Promise<T> {
    const admin = this.admin();
    try {
      return await task(admin);
    } finally {
      await admin.close();
    }
  }

  /**
   * Acknowledged by every in-sync replica, as kafkajs did; a key's partition is Java's (and
   * kafkajs's) murmur2 of it, so both releases put a key's events on the same partition.
   */
  producer(): Producer {
    return new Producer(
      this.logged(new KafkaProducer({ ...this.options, acks: ProduceAcks.ALL, partitioner: compatibilityPartitioner })),
    );
  }

  /**
   * A group member. It assigns with the protocol name kafkajs's round robin uses: members of both
   * releases share a group during a rollout, and the broker admits only members with a protocol in common.
   */
  consumer(groupId: string, group: { sessionTimeout?: number; heartbeatInterval?: number; maxWaitTime?: number }) {
    return this.logged(
      new Consumer({
        ...this.options,
        groupId,
        ...group,
        autocommit: false,
        protocols: [{ name: "RoundRobinAssigner", version: 0, metadata: Buffer.alloc(0) }],
      }),
    );
  }
}

export async function topicOffsets(admin: Admin, topic: string): Promise<TopicOffsets> {
  const { topics } = await admin.metadata({ topics: [topic], forceUpdate: true });
  const partitions = [...Array(topics.get(topic)?.partitionsCount ?? 0).keys()];
  const read = async (timestamp: bigint) => {
    const [listed] = await admin.listOffsets({
      topics: [{ name: topic, partitions: partitions.map((partitionIndex) => ({ partitionIndex, timestamp })) }],
    });
    return new Map(listed?.partitions.map((p) => [p.partitionIndex, String(p.offset)]));
  };
  const [ends, starts] = await Promise.all([read(ListOffsetTimestamps.LATEST), read(ListOffsetTimestamps.EARLIEST)]);
  return partitions.map((partition) => {
    const end = ends.get(partition) ?? "0";
    return { partition, offset: end, high: end, low: starts.get(partition) ?? "0" };
  });
}

export class Producer {
  constructor(readonly client: KafkaProducer) {}

  disconnect(): Promise<void> {
    return this.client.close();
  }

  /** Publishes `messages` in order; resolves with each partition written and the offset of its first message there. */
  async send(o: { topic: string; messages: OutgoingMessage[] }): Promise<{ partition: number; baseOffset: string }[]> {
    const { offsets = [] } = await this.client.send({
      messages: o.messages.map((m) => ({
        topic: o.topic,
        key: Buffer.from(m.key),
        value: m.value,
        headers: new Map(
          Object.entries(m.headers ?? {}).flatMap(([k, v]) =>
            v === undefined ? [] : [[Buffer.from(k), Buffer.from(v)]],
          ),
        ),
      })),
    });
    return offsets.map((o) => ({ partition: o.partition, baseOffset: String(o.offset) }));
  }
}

export function createKafka(brokers: string, clientId: string, logger: Logger, credentials?: KafkaCredentials): Kafka {
  return new Kafka(
    {
      clientId,
      bootstrapBrokers: brokers.split(","),
      ...(credentials
        ? {
            sasl: {
              mechanism: credentials.mechanism.toUpperCase() as SASLMechanismValue,
              username: credentials.username,
              password: credentials.password,
            },
            ...(credentials.ssl ? { tls: {} } : {}),
          }
        : {}),
      connectTimeout: 3000,
      retries: 8,
      retryDelay: (_client, _operation, attempt) => Math.min(200 * 2 ** attempt, 2_000),
    },
    logger.child({ component: "kafka" }),
  );
}

/** A service's client (id `<namespace>.<service>`), signing in with the settings' credentials. */
export function serviceKafka(settings: Settings, service: string, logger: Logger): Kafka {
  return createKafka(
    settings.KAFKA_BROKERS,
    `${settings.DATA_NAMESPACE}.${service}`,
    logger,
    kafkaCredentials(settings),
  );
}

/** Whether trying again may succeed: the broker said so, or it could not be reached (or timed out) at all. */
export function retriable(err: unknown): boolean {
  const e = err as GenericError | undefined;
  return (
    typeof e?.findBy === "function" && (e.findBy("canRetry", true) ?? e.findBy("code", "PLT_KFK_NETWORK")) !== null
  );
}

/** How long (backing off to 2 s) a broker that has just started may take to settle its metadata. */
const SETTLING = { attempts: 8, firstDelayMs: 250, maxDelayMs: 2_000 };

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
  opts: { configureExisting?: boolean } = {},
): Promise<void> {
  await kafka.withAdmin((admin) =>
    retry(
      "creating the topics",
      async () => {
        const existing = new Set(await admin.listTopics());
        for (const k of keys.filter((k) => !existing.has(topicName(namespace, k)))) {
          // No replication factor: the broker's default.replication.factor applies (1 locally, 3 in a cluster).
          await admin.createTopics({
            topics: [topicName(namespace, k)],
            partitions: TOPICS[k].partitions,
            configs: topicConfig(k),
          });
        }
        if (opts.configureExisting) {
          await admin.alterConfigs({
            resources: keys.map((k) => ({
              resourceType: ConfigResourceTypes.TOPIC,
              resourceName: topicName(namespace, k),
              configs: topicConfig(k),
            })),
          });
        }
        await admin.metadata({ topics: keys.map((k) => topicName(namespace, k)), forceUpdate: true });
      },
      SETTLING,
    ),
  );
}

/**
 * Runs `attempt` again (after 250 ms, 500 ms, ... up to 2 s) while the broker refuses it with an error
 * it marks retriable: a topic created a moment ago may still answer "This server is not the leader for
 * that topic-partition" while its metadata settles.
 */
export function whileMetadataSettles<T>(attempt: () => Promise<T>): Promise<T> {
  return retry("reading topic metadata", attempt, { ...SETTLING, retryIf: retriable });
}

/** True when a broker answers a metadata request within the timeout. */
export async function kafkaReachable(admin: Admin, timeoutMs = 2000): Promise<boolean> {
  const answered = admin.metadata({ topics: [], forceUpdate: true }).then(
    () => true,
    () => false,
  );
  return (await atMost(answered, timeoutMs)) && (await answered);
}
