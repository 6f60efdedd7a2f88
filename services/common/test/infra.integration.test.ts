import { afterAll, describe, expect, it } from "@jest/globals";
import { randomUUID } from "node:crypto";
import { fromBinary, create, toBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import { consume } from "../src/background/consume.js";
import { connectMongo, type Mongo } from "../src/store/mongo.js";
import { createKafka, ensureTopics } from "../src/events/kafka.js";
import { createLogger } from "../src/runtime/logger.js";
import { topicName } from "../src/events/topics.js";
import { kafkaConsumerLag } from "../src/runtime/metrics.js";
import { testKafkaAdmin } from "../../../test/support/services.js";

// Talks to the real MongoDB-wire server and Kafka through the project's own helpers.
const logger = createLogger("test", "error");
const namespace = `t${randomUUID().slice(0, 8)}`;
let mongo: Mongo | undefined;

afterAll(async () => {
  await mongo?.client.db(`${namespace}_probe`).dropDatabase();
  await mongo?.close();
});

describe("infrastructure helpers", () => {
  it("write and read a document on the MongoDB-compatible server", async () => {
    mongo = await connectMongo(process.env.TEST_MONGODB_URI!, `${namespace}_probe`);
    expect(await mongo.ping()).toBe(true);
    const things = mongo.db.collection<{ _id: string; n: number }>("things");
    await things.createIndex({ n: 1 }, { unique: true });
    await things.insertOne({ _id: "a", n: 1 });
    await expect(things.insertOne({ _id: "b", n: 1 })).rejects.toMatchObject({ code: 11000 });
    const after = await things.findOneAndUpdate(
      { _id: "c" },
      { $setOnInsert: { n: 2 } },
      { upsert: true, returnDocument: "after" },
    );
    expect(after).toEqual({ _id: "c", n: 2 });
    expect(await things.find().sort({ n: 1 }).toArray()).toEqual([
      { _id: "a", n: 1 },
      { _id: "c", n: 2 },
    ]);
  });

  it("produce and consume an event on Kafka", async () => {
    const kafka = createKafka(process.env.TEST_KAFKA_BROKERS!, "test", logger, testKafkaAdmin());
    await ensureTopics(kafka, namespace);
    const topic = topicName(namespace, "partnerEvents");
    const producer = kafka.producer();
    const sent = create(eventsv1.PartnerEventSchema, {
      kind: eventsv1.PartnerEventKind.CREDENTIAL_REVOKED,
      partnerId: "ptr_x",
      clientId: "cli_y",
      occurredAt: 42n,
    });
    await producer.send({
      topic,
      messages: [{ key: "ptr_x", value: Buffer.from(toBinary(eventsv1.PartnerEventSchema, sent)) }],
    });
    await producer.disconnect();

    let arrived: (event: eventsv1.PartnerEvent) => void = () => {};
    const arrival = new Promise<eventsv1.PartnerEvent>((resolve) => (arrived = resolve));
    const consuming = await consume({
      kafka,
      logger,
      group: `${namespace}.probe`,
      topic,
      name: "probe",
      each: async (message) => arrived(fromBinary(eventsv1.PartnerEventSchema, message.value!)),
    });
    const received = await arrival;
    await consuming.stop();
    expect(received.clientId).toBe("cli_y");
    expect(received.kind).toBe(eventsv1.PartnerEventKind.CREDENTIAL_REVOKED);
    expect(received.occurredAt).toBe(42n);
  });

  it("pi_kafka_consumer_lag: read at scrape from the group's committed offsets and the topic's ends", async () => {
    const kafka = createKafka(process.env.TEST_KAFKA_BROKERS!, "test", logger, testKafkaAdmin());
    await ensureTopics(kafka, namespace);
    const topic = topicName(namespace, "fileEvents");
    const group = `${namespace}.lag`;
    const producer = kafka.producer();
    const send = (n: number) =>
      producer.send({ topic, messages: Array.from({ length: n }, () => ({ key: "k", value: Buffer.from("x") })) });
    const lag = async () => (await kafkaConsumerLag.get()).values.find((v) => v.labels.group === group)?.value;
    await send(2);
    let handled = 0;
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    let holding: () => void = () => {};
    const reachedHold = new Promise<void>((resolve) => (holding = resolve));
    const consuming = await consume({
      kafka,
      logger,
      group,
      topic,
      name: "lag",
      each: async () => {
        if (++handled === 3) {
          holding();
          await held;
        }
      },
    });
    try {
      await eventually(async () => expect(await lag()).toBe(0));
      await send(3);
      await reachedHold;
      expect(await lag()).toBe(3);
    } finally {
      release();
      await consuming.stop();
      await producer.disconnect();
    }
  });
});

async function eventually(assertion: () => Promise<void>, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await assertion();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
