import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomUUID } from "node:crypto";
import { Kafka, logLevel, type SASLOptions } from "kafkajs";
import { createKafka, ensureTopics, type KafkaCredentials } from "../src/kafka.js";
import { createLogger } from "../src/logger.js";
import { grantKafkaAccess, type KafkaUser } from "../src/kafka-access.js";
import { topicName } from "../src/topics.js";
import { testKafkaAdmin, testKafkaUser } from "../../../test/support/services.js";

// The test Kafka runs as the local stack's and the chart's: SASL/SCRAM and the StandardAuthorizer.
// A forged event (a connection's user publishing PARTNER_REINSTATED) is what this must refuse.
const logger = createLogger("kafka-access-test", "silent");
const brokers = process.env.TEST_KAFKA_BROKERS!;
const namespace = `t${randomUUID().slice(0, 8)}`;
const userOf = (name: KafkaUser): KafkaCredentials => testKafkaUser(name);
// No retries: a refusal is the answer, not a moment to wait through.
const kafkaAs = (credentials?: KafkaCredentials, retries = 0) =>
  new Kafka({
    clientId: `${namespace}.probe`,
    brokers: brokers.split(","),
    ...(credentials
      ? {
          sasl: {
            mechanism: credentials.mechanism,
            username: credentials.username,
            password: credentials.password,
          } as SASLOptions,
        }
      : {}),
    retry: { retries },
    connectionTimeout: 3000,
    logLevel: logLevel.NOTHING,
  });

/** The broker's error code under kafkajs's wrappers (originalError, cause), else the error's name and message. */
function kind(err: unknown): string {
  type Wrapped = { type?: string; originalError?: Wrapped; cause?: Wrapped } | undefined;
  for (let e = err as Wrapped; e; e = e.originalError ?? e.cause) if (e.type) return e.type;
  return `${(err as Error).name}: ${(err as Error).message}`;
}

async function send(
  credentials: KafkaCredentials | undefined,
  key: "partnerEvents" | "connectionEvents" | "fileEvents" | "auditEvents",
) {
  const producer = kafkaAs(credentials).producer({ retry: { retries: 0 }, allowAutoTopicCreation: false });
  try {
    await producer.connect();
    await producer.send({
      topic: topicName(namespace, key),
      messages: [{ key: "ptr_x", value: Buffer.from("forged") }],
    });
    return "sent";
  } catch (err) {
    return kind(err);
  } finally {
    await producer.disconnect().catch(() => undefined);
  }
}

beforeAll(async () => {
  const admin = createKafka(brokers, `${namespace}.admin`, logger, testKafkaAdmin());
  await ensureTopics(admin, namespace);
  await grantKafkaAccess(admin, namespace);
});

afterAll(async () => {
  const admin = createKafka(brokers, `${namespace}.admin`, logger, testKafkaAdmin()).admin();
  await admin.connect();
  await admin
    .deleteTopics({
      topics: ["partnerEvents", "connectionEvents", "fileEvents", "auditEvents"].map((k) =>
        topicName(namespace, k as "partnerEvents"),
      ),
    })
    .catch(() => undefined);
  await admin.disconnect();
});

describe("Kafka authentication and ACLs", () => {
  it("a service publishes its own topics", async () => {
    expect(await send(userOf("auth"), "partnerEvents")).toBe("sent");
    expect(await send(userOf("connection"), "connectionEvents")).toBe("sent");
    expect(await send(userOf("webhook"), "auditEvents")).toBe("sent");
  });

  it("a forged partner event from another service's user is refused (TOPIC_AUTHORIZATION_FAILED)", async () => {
    for (const user of ["connection", "webhook", "file-intake", "gateway"] as const) {
      expect([user, await send(userOf(user), "partnerEvents")]).toEqual([user, "TOPIC_AUTHORIZATION_FAILED"]);
    }
    expect(await send(userOf("webhook"), "connectionEvents")).toBe("TOPIC_AUTHORIZATION_FAILED");
    expect(await send(userOf("gateway"), "auditEvents")).toBe("TOPIC_AUTHORIZATION_FAILED");
  });

  it("a client without credentials, or with a wrong password, is not let in", async () => {
    expect(await send(undefined, "partnerEvents")).not.toBe("sent");
    expect(await send({ ...userOf("auth"), password: "not-the-password" }, "partnerEvents")).toMatch(
      /SASL|Authentication/i,
    );
  });

  it("a consumer joins its own group to read a topic it consumes, and neither another service's group nor a topic it does not consume", async () => {
    // kafkajs joins the group after run() resolves. The outcome: "read" once a message arrives (each
    // topic here holds one, sent above), or the consumer's crash; a join alone when `joined` suffices.
    const outcome = async (
      user: KafkaUser,
      groupId: string,
      key: "partnerEvents" | "auditEvents",
      opts: { retries?: number; joined?: boolean } = {},
    ) => {
      const consumer = kafkaAs(userOf(user), opts.retries ?? 0).consumer({
        groupId,
        retry: { retries: opts.retries ?? 0 },
      });
      let settle: (outcome: string) => void = () => {};
      const settled = new Promise<string>((resolve) => (settle = resolve));
      if (opts.joined) consumer.on(consumer.events.GROUP_JOIN, () => settle("joined"));
      consumer.on(consumer.events.CRASH, (e) => settle(kind(e.payload.error)));
      await consumer.connect();
      try {
        await consumer.subscribe({ topic: topicName(namespace, key), fromBeginning: true });
        await consumer.run({ eachMessage: async () => settle("read") });
        return await settled;
      } catch (err) {
        return kind(err);
      } finally {
        await consumer.disconnect().catch(() => undefined);
      }
    };
    // Retries for the first join only: the broker may still be creating its offsets topic.
    expect(await outcome("gateway", `${namespace}.gateway.probe`, "partnerEvents", { retries: 8 })).toBe("read");
    // The broker refuses to name the coordinator of a group the user may not use; kafkajs reports it so.
    expect(await outcome("gateway", `${namespace}.webhook.main`, "partnerEvents")).toMatch(
      /^KafkaJSGroupCoordinatorNotFound/,
    );
    expect(await outcome("gateway", `${namespace}.gateway.probe2`, "auditEvents")).toMatch(
      /TOPIC_AUTHORIZATION_FAILED|Not authorized to access topics/,
    );
  });
});
