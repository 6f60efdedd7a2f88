import { createHook } from "node:async_hooks";
import { once } from "node:events";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "@jest/globals";
import { createKafka, ensureTopics, topicOffsets } from "../src/events/kafka.js";
import { createLogger } from "../src/runtime/logger.js";
import { topicName } from "../src/events/topics.js";
import { testKafkaAdmin } from "../../../test/support/services.js";

// kafkajs 2.2.4 re-armed a 1 ms timer after every answer on every broker connection, forever
// (kafkajs issue 1556): about a thousand timers a second in an idle process, which a patch removed.
// Its replacement, @platformatic/kafka, must not do the like: while a producer, an admin and a group
// consumer sit idle, the timers created between a consumer's idle fetches are a handful, not hundreds.
// The window is counted in fetches, each waiting FETCH_WAIT_MS at the broker; the idle CPU itself
// is the bench's (bench/system.bench.ts, "idle:").

const FETCH_WAIT_MS = 300;

describe("the Kafka producer beside the previous release", () => {
  it("puts a key's events on the partition kafkajs (1.0.0) chose: Java's murmur2 of the key", async () => {
    const namespace = `t${randomBytes(5).toString("hex")}`;
    const kafka = createKafka(
      process.env.TEST_KAFKA_BROKERS!,
      `${namespace}.keys`,
      createLogger("keys-test", "silent"),
      testKafkaAdmin(),
    );
    await ensureTopics(kafka, namespace, ["fileEvents"]);
    const producer = kafka.producer();
    try {
      // Each key's partition among 3 as kafkajs 2.2.4's DefaultPartitioner computed it.
      const kafkajs = { ptr_a: 1, ptr_b: 2, ptr_c: 0, foobar: 0, "a-little-bit-long-string": 2 };
      const written: Record<string, number> = {};
      for (const key of Object.keys(kafkajs)) {
        const [meta] = await producer.send({
          topic: topicName(namespace, "fileEvents"),
          messages: [{ key, value: Buffer.from("v") }],
        });
        written[key] = meta!.partition;
      }
      expect(written).toEqual(kafkajs);
    } finally {
      await producer.disconnect();
    }
  });
});

describe("an idle Kafka client", () => {
  it("schedules no timer loop: a producer, an admin and a consumer idle through three fetches create a handful of timers", async () => {
    const namespace = `t${randomBytes(5).toString("hex")}`;
    const kafka = createKafka(
      process.env.TEST_KAFKA_BROKERS!,
      `${namespace}.idle`,
      createLogger("idle-test", "silent"),
      testKafkaAdmin(),
    );
    await ensureTopics(kafka, namespace, ["auditEvents"]);
    const topic = topicName(namespace, "auditEvents");
    const producer = kafka.producer();
    const admin = kafka.admin();
    const consumer = kafka.consumer(`${namespace}.idle.probe`, { maxWaitTime: FETCH_WAIT_MS });
    try {
      await producer.send({ topic, messages: [{ key: "k", value: Buffer.from("v") }] });
      await topicOffsets(admin, topic);
      const stream = await consumer.consume({ topics: [topic], mode: "earliest" });
      await once(stream, "data");
      await once(stream, "fetch"); // from here on, every fetch waits at the broker for nothing

      let timers = 0;
      const hook = createHook({ init: (_id, type) => void (type === "Timeout" && timers++) }).enable();
      for (let i = 0; i < 3; i++) await once(stream, "fetch");
      hook.disable();
      // Three fetches of FETCH_WAIT_MS each: a 1 ms loop on each of the open connections would create hundreds.
      expect(timers).toBeLessThan(30);
    } finally {
      await Promise.allSettled([consumer.close(true), producer.disconnect(), admin.close()]);
    }
  });
});
