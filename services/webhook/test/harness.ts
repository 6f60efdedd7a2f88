import { create, toBinary } from "@bufbuild/protobuf";
import { randomUUID } from "node:crypto";
import { commonv1, eventsv1 } from "@pi/proto";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { createKafka, type Producer, kafkaCredentials } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { topicName } from "@pi/common/events/topics";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startAuthService } from "@pi/auth";
import { addressOf, as, quickConsumerStops, testSettings } from "../../../test/support/services.js";
import { opsFor } from "../../../test/support/partner-api.js";
import { startWebhookService, type WebhookServiceOptions } from "../src/service.js";
import type { WebhookEventDoc } from "../src/store.js";

// The auth service (webhook targets, partner events) and the webhook service in this process, on
// the real MongoDB-wire server and Kafka, with a producer that plays the connection service's part.

export interface WebhookHarness {
  settings: Settings;
  ops: ReturnType<typeof opsFor>;
  webhook: RunningService;
  /** Publishes a connection event as the connection service would; returns it. */
  emit(
    over: Partial<Omit<eventsv1.ConnectionEvent, "$typeName">> & { partnerId: string },
  ): Promise<eventsv1.ConnectionEvent>;
  /** Another replica of the webhook service on the same data. */
  startReplica(): Promise<RunningService>;
  /** The webhook events stored for a partner. */
  stored(partnerId: string): Promise<WebhookEventDoc[]>;
  stop(): Promise<void>;
}

export async function startWebhookHarness(
  overrides: Record<string, string> = {},
  options: WebhookServiceOptions = {},
): Promise<WebhookHarness> {
  quickConsumerStops();
  let settings = testSettings({
    WEBHOOK_RETRY_BASE_SECONDS: "0.2",
    WEBHOOK_ATTEMPT_TIMEOUT_SECONDS: "3",
    ...overrides,
  });
  const logger = createLogger("webhook-test", settings.LOG_LEVEL);
  const auth = await startAuthService(as(settings, "auth"), logger.child({ service: "auth" }));
  settings = { ...settings, ...addressOf("auth", auth) };
  const webhook = await startWebhookService(as(settings, "webhook"), logger.child({ service: "webhook" }), options);
  settings = { ...settings, ...addressOf("webhook", webhook) };
  const replicas: RunningService[] = [webhook];
  const producer: Producer = createKafka(
    settings.KAFKA_BROKERS,
    "webhook-test",
    logger,
    kafkaCredentials(settings),
  ).producer();
  const mongo: Mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "webhook"));
  const events = mongo.db.collection<WebhookEventDoc>("webhook_events");
  return {
    settings,
    ops: opsFor(settings),
    webhook,
    async emit(over) {
      const event = create(eventsv1.ConnectionEventSchema, {
        eventId: randomUUID(),
        type: "connection.approved",
        connectionId: `con_${randomUUID().replace(/-/g, "")}`,
        status: "approved",
        mode: commonv1.Mode.LIVE,
        occurredAt: BigInt(Date.now()),
        ...over,
      });
      await producer.send({
        topic: topicName(settings.DATA_NAMESPACE, "connectionEvents"),
        messages: [{ key: event.partnerId, value: Buffer.from(toBinary(eventsv1.ConnectionEventSchema, event)) }],
      });
      return event;
    },
    async startReplica() {
      const replica = await startWebhookService(
        { ...as(settings, "webhook"), WEBHOOK_SERVICE_PORT: 0 },
        logger.child({ service: "webhook-replica" }),
        options,
      );
      replicas.push(replica);
      return replica;
    },
    stored: (partnerId) => events.find({ partnerId }).sort({ createdAt: 1 }).toArray(),
    async stop() {
      await producer.disconnect();
      await Promise.all(replicas.map((r) => r.stop()));
      await auth.stop();
      await mongo.close();
    },
  };
}

/** Polls until `check` returns a value that is not undefined. */
export async function eventually<T>(
  check: () => Promise<T | undefined>,
  timeoutMs = 20_000,
  what = "condition",
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
