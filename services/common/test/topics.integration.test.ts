import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomBytes } from "node:crypto";
import { ConfigResourceTypes } from "@platformatic/kafka";
import type { Admin } from "@platformatic/kafka";
import { createKafka, ensureTopics } from "../src/events/kafka.js";
import { createLogger } from "../src/runtime/logger.js";
import { topicConfig, TOPICS, topicName, type TopicKey } from "../src/events/topics.js";
import { testKafkaAdmin } from "../../../test/support/services.js";

// Every Kafka topic is bounded by retention.ms and retention.bytes (services/common/src/events/topics.ts;
// docs/security.md, "Stores a partner can grow"), on the real broker: created with them, and an
// admin's run sets them on a topic that was created without.

const kafka = createKafka(
  process.env.TEST_KAFKA_BROKERS!,
  "topics-test",
  createLogger("topics-test", "silent"),
  testKafkaAdmin(),
);
let admin: Admin;

beforeAll(() => {
  admin = kafka.admin();
});
afterAll(async () => {
  await admin?.close();
});

async function configOf(topic: string): Promise<Record<string, string>> {
  const [described] = await admin.describeConfigs({
    resources: [{ resourceType: ConfigResourceTypes.TOPIC, resourceName: topic }],
  });
  return Object.fromEntries(described!.configs.map((c) => [c.name, c.value]));
}
const expected = (key: TopicKey) => Object.fromEntries(topicConfig(key).map((c) => [c.name, c.value]));

describe("every Kafka topic is bounded by retention.ms and retention.bytes", () => {
  it("ensureTopics creates each topic with its retention, segment size and roll time", async () => {
    const namespace = `t${randomBytes(5).toString("hex")}`;
    await ensureTopics(kafka, namespace);
    for (const key of Object.keys(TOPICS) as TopicKey[]) {
      const config = await configOf(topicName(namespace, key));
      expect(config).toMatchObject(expected(key));
      expect(Number(config["retention.ms"])).toBe(7 * 86_400_000);
    }
  });

  it("an admin's run sets them on a topic created without them", async () => {
    const namespace = `t${randomBytes(5).toString("hex")}`;
    const topic = topicName(namespace, "auditEvents");
    await admin.createTopics({ topics: [topic], partitions: 1 });
    expect((await configOf(topic))["retention.bytes"]).toBe("-1");
    await ensureTopics(kafka, namespace, ["auditEvents"], { configureExisting: true });
    expect(await configOf(topic)).toMatchObject(expected("auditEvents"));
  });
});
