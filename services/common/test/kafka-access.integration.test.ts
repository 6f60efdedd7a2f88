import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomUUID } from "node:crypto";
import { createKafka, ensureTopics, Kafka, type KafkaCredentials } from "../src/events/kafka.js";
import { createLogger } from "../src/runtime/logger.js";
import { grantKafkaAccess, type KafkaUser } from "../src/events/kafka-access.js";
import { topicName } from "../src/events/topics.js";
import { testKafkaAdmin, testKafkaUser } from "../../../test/support/services.js";

// The test Kafka runs as the local stack's and the chart's: SASL/SCRAM and the StandardAuthorizer.
// A forged event (a connection's user publishing PARTNER_REINSTATED) is what this must refuse.
const logger = createLogger("kafka-access-test", "silent");
const brokers = process.env.TEST_KAFKA_BROKERS!;
const namespace = `t${randomUUID().slice(0, 8)}`;
const userOf = (name: KafkaUser): KafkaCredentials => testKafkaUser(name);
// No retries: a refusal is the answer, not a moment to wait through.
const kafkaAs = (credentials?: KafkaCredentials, retries = 0) => {
  const { options } = createKafka(brokers, `${namespace}.probe`, logger, credentials);
  return new Kafka({ ...options, retries }, logger);
};

/** The broker's error code (apiId) anywhere in the library's error (its errors, its cause), else its code and message. */
function kind(err: unknown): string {
  type E = { apiId?: string; errors?: E[]; cause?: E; code?: string; message?: string } | undefined;
  const apiId = (e: E): string | undefined =>
    e === undefined ? undefined : (e.apiId ?? e.errors?.map(apiId).find((a) => a !== undefined) ?? apiId(e.cause));
  return apiId(err as E) ?? `${(err as E)?.code}: ${(err as E)?.message}`;
}

async function send(
  credentials: KafkaCredentials | undefined,
  key: "partnerEvents" | "connectionEvents" | "fileEvents" | "auditEvents",
) {
  const producer = kafkaAs(credentials).producer();
  try {
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
  await admin
    .deleteTopics({
      topics: ["partnerEvents", "connectionEvents", "fileEvents", "auditEvents"].map((k) =>
        topicName(namespace, k as "partnerEvents"),
      ),
    })
    .catch(() => undefined);
  await admin.close();
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
    // The outcome: "read" once a message arrives (each topic here holds one, sent above), or the
    // error that ends the join or the stream.
    const outcome = async (user: KafkaUser, groupId: string, key: "partnerEvents" | "auditEvents", retries = 0) => {
      const consumer = kafkaAs(userOf(user), retries).consumer(groupId, {});
      try {
        const stream = await consumer.consume({ topics: [topicName(namespace, key)], mode: "earliest" });
        return await new Promise<string>((resolve) => {
          stream.once("data", () => resolve("read"));
          stream.once("error", (err) => resolve(kind(err)));
        });
      } catch (err) {
        return kind(err);
      } finally {
        await consumer.close(true).catch(() => undefined);
      }
    };
    // Retries for the first join only: the broker may still be creating its offsets topic.
    expect(await outcome("gateway", `${namespace}.gateway.probe`, "partnerEvents", 8)).toBe("read");
    expect(await outcome("gateway", `${namespace}.webhook.main`, "partnerEvents")).toBe("GROUP_AUTHORIZATION_FAILED");
    expect(await outcome("gateway", `${namespace}.gateway.probe2`, "auditEvents")).toMatch(
      /TOPIC_AUTHORIZATION_FAILED|Not authorized to access topics/,
    );
  });
});
