import { afterAll, beforeAll, it } from "@jest/globals";
import { randomUUID } from "node:crypto";
import { create, toBinary } from "@bufbuild/protobuf";
import { commonv1, eventsv1 } from "@pi/proto";
import { createKafka, kafkaCredentials } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { topicName } from "@pi/common/events/topics";
import { startTestStack, type TestStack } from "../test/support/services.js";
import { accessToken, call, opsFor } from "../test/support/partner-api.js";
import { startTestReceiver, type TestReceiver } from "../test/support/webhook-receiver.js";
import { percentile, report } from "./report.js";

// Webhook delivery on the local stack to a receiver on 127.0.0.1 that verifies every signature.

let stack: TestStack;
const receivers: TestReceiver[] = [];

beforeAll(async () => {
  stack = await startTestStack();
});
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.close()));
  await stack?.stop();
});

async function partnerWithReceiver(name: string) {
  const receiver = await startTestReceiver();
  receivers.push(receiver);
  const ops = opsFor(stack.settings);
  const partner = await ops.partnerCreate({ name, webhookUrl: receiver.url });
  receiver.useSecret(partner.signing_secret);
  return { partner, receiver, ops };
}

it("delivered webhook events per second", async () => {
  const { partner, receiver } = await partnerWithReceiver("Bench Throughput");
  const producer = createKafka(
    stack.settings.KAFKA_BROKERS,
    "bench",
    createLogger("bench", "error"),
    kafkaCredentials(stack.settings),
  ).producer();
  const n = 500;
  const messages = Array.from({ length: n }, () => {
    const e = create(eventsv1.ConnectionEventSchema, {
      eventId: randomUUID(),
      type: "connection.approved",
      partnerId: partner.partner_id,
      connectionId: `con_${randomUUID().replace(/-/g, "")}`,
      status: "approved",
      mode: commonv1.Mode.LIVE,
      occurredAt: BigInt(Date.now()),
    });
    return { key: partner.partner_id, value: Buffer.from(toBinary(eventsv1.ConnectionEventSchema, e)) };
  });
  const started = performance.now();
  for (let i = 0; i < n; i += 100) {
    await producer.send({
      topic: topicName(stack.settings.DATA_NAMESPACE, "connectionEvents"),
      messages: messages.slice(i, i + 100),
    });
  }
  await receiver.waitFor((a) => a.length >= n, 120_000, `${n} deliveries`);
  const seconds = (performance.now() - started) / 1000;
  await producer.disconnect();
  report("webhooks: throughput (connection events on Kafka to verified 2xx at a local receiver)", {
    events: n,
    seconds,
    delivered_per_second: n / seconds,
    rejected_signatures: receiver.rejected.length,
  });
});

it("delay from a caregiver approve to the webhook's arrival", async () => {
  const { partner, receiver, ops } = await partnerWithReceiver("Bench Latency");
  const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
  const samples = 60;
  const ids: string[] = [];
  for (let i = 0; i < samples; i++) {
    const elder = await ops.elderCreate();
    ids.push(
      (await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address })).json!.id as string,
    );
  }
  const delays: number[] = [];
  for (const id of ids) {
    const started = Date.now();
    await ops.connectionAct("approve", id);
    const arrivals = await receiver.waitFor(
      (a) => a.some((x) => x.event.data.connection_id === id),
      20_000,
      `the webhook of ${id}`,
    );
    delays.push(arrivals.find((x) => x.event.data.connection_id === id)!.at - started);
  }
  report("webhooks: caregiver approve to webhook arrival (ms)", {
    samples,
    p50_ms: percentile(delays, 50),
    p99_ms: percentile(delays, 99),
    max_ms: Math.max(...delays),
  });
});
