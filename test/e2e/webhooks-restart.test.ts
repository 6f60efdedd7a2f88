import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { commonv1, eventsv1 } from "@pi/proto";
import { connectMongo, createKafka, createLogger, createProducer, databaseName, topicName, type Mongo, type Producer, type RunningService, type Settings, kafkaCredentials } from "@pi/common";
import { startAuthService } from "@pi/auth";
import { addressOf, as, grantTestKafkaAccess, identityKey, kafkaUserEnv, testSettings } from "../support/services.js";
import { opsFor } from "../support/partner-api.js";
import { startTestReceiver, type TestReceiver } from "../support/webhook-receiver.js";

// The webhook service as its own process (the compiled services/webhook/dist/main.js, as npm start
// and the chart run it), killed with SIGKILL in the middle of its retry schedule and started again.

const main = join(process.cwd(), "services", "webhook", "dist", "main.js");

let settings: Settings;
let auth: RunningService;
let producer: Producer;
let mongo: Mongo;
let child: ChildProcess | undefined;
let receiver: TestReceiver | undefined;

function startChild(): ChildProcess {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    MONGODB_URI: settings.MONGODB_URI,
    KAFKA_BROKERS: settings.KAFKA_BROKERS,
    DATA_NAMESPACE: settings.DATA_NAMESPACE,
    AUTH_SERVICE_URL: settings.AUTH_SERVICE_URL,
    AUTH_ADMIN_URL: settings.AUTH_ADMIN_URL,
    WEBHOOK_SERVICE_PORT: "0",
    WEBHOOK_ADMIN_PORT: "0",
    METRICS_PORT: "0",
    WEBHOOK_RETRY_BASE_SECONDS: "0.3",
    WEBHOOK_ATTEMPT_TIMEOUT_SECONDS: "2",
    WEBHOOK_ALLOW_INSECURE_URLS: "true",
    LOG_LEVEL: "warn",
    KAFKAJS_NO_PARTITIONER_WARNING: "1",
    SERVICE_IDENTITY_KEY: identityKey("webhook"),
    SERVICE_IDENTITY_PUBLIC_KEYS: settings.SERVICE_IDENTITY_PUBLIC_KEYS!,
    ...kafkaUserEnv("webhook"),
  };
  const proc = spawn(process.execPath, [main], { env, stdio: ["ignore", "ignore", "inherit"] });
  return proc;
}

function kill(proc: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
    proc.once("exit", () => resolve());
    proc.kill("SIGKILL");
  });
}

beforeAll(async () => {
  settings = testSettings();
  await grantTestKafkaAccess(settings.DATA_NAMESPACE);
  const logger = createLogger("restart-test", settings.LOG_LEVEL);
  auth = await startAuthService(as(settings, "auth"), logger);
  settings = { ...settings, ...addressOf("auth", auth) };
  producer = createProducer(createKafka(settings.KAFKA_BROKERS, "restart-test", logger, kafkaCredentials(settings)));
  await producer.connect();
  mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "webhook"));
});

afterAll(async () => {
  if (child) await kill(child);
  await receiver?.close();
  await producer?.disconnect();
  await mongo?.close();
  await auth?.stop();
});

async function emit(partnerId: string, n: number): Promise<string[]> {
  const events = Array.from({ length: n }, () =>
    create(eventsv1.ConnectionEventSchema, {
      eventId: randomUUID(),
      type: "connection.approved",
      partnerId,
      connectionId: `con_${randomUUID().replace(/-/g, "")}`,
      status: "approved",
      mode: commonv1.Mode.LIVE,
      occurredAt: BigInt(Date.now()),
    }),
  );
  await producer.send({
    topic: topicName(settings.DATA_NAMESPACE, "connectionEvents"),
    messages: events.map((e) => ({ key: partnerId, value: Buffer.from(toBinary(eventsv1.ConnectionEventSchema, e)) })),
  });
  return events.map((e) => e.connectionId);
}

describe("webhook service restart", () => {
  it("killed mid-schedule with SIGKILL, it resumes after restart with no event lost or duplicated in the store", async () => {
    const ops = opsFor(settings);
    const partner = await ops.partnerCreate({ name: "Restart Pharmacy" });
    // Every event fails twice before it is accepted, so the schedule is busy when the kill comes.
    receiver = await startTestReceiver(partner.signing_secret, (_e, nth) => (nth <= 2 ? "fail" : "ok"));
    await ops.partnerSetWebhook(partner.partner_id, receiver.url);
    const events = mongo.db.collection("webhook_events");

    child = startChild();
    const before = await emit(partner.partner_id, 30);
    await receiver.waitFor((a) => a.filter((x) => x.outcome === "ok").length >= 5, 45_000, "the first deliveries");
    await kill(child);
    // Sentinel: every connection of the dead process closed, so each request it sent has been read.
    await receiver.drained();
    const atKill = await events.find({ partnerId: partner.partner_id }).toArray();
    const arrivalsAtKill = receiver.arrivals.length;
    // Mid-schedule: some delivered, some waiting for a retry or not yet tried.
    expect(atKill.filter((d) => d.state === "delivered").length).toBeGreaterThan(0);
    expect(atKill.filter((d) => d.state === "pending").length + (30 - atKill.length)).toBeGreaterThan(0);

    const during = await emit(partner.partner_id, 20);
    // Nothing is left to deliver them: the only deliverer has exited and everything it sent was read.
    expect(child!.exitCode !== null || child!.signalCode !== null).toBe(true);
    expect(receiver.arrivals.length).toBe(arrivalsAtKill);

    child = startChild();
    const all = [...before, ...during];
    await receiver.waitFor(
      (a) => new Set(a.filter((x) => x.outcome === "ok").map((x) => x.event.data.connection_id)).size >= all.length,
      75_000,
      "every event delivered after the restart",
    );

    const stored = await events.find({ partnerId: partner.partner_id }).toArray();
    expect(stored).toHaveLength(all.length);
    expect(new Set(stored.map((d) => d.sourceEventId)).size).toBe(all.length);
    expect(new Set(stored.map((d) => d.connectionId))).toEqual(new Set(all));

    // One evt_ id per connection event, whatever the receiver saw across the kill.
    const idsByConnection = new Map<string, Set<string>>();
    for (const a of receiver.arrivals) {
      idsByConnection.set(a.event.data.connection_id, (idsByConnection.get(a.event.data.connection_id) ?? new Set()).add(a.event.id));
    }
    expect([...idsByConnection.values()].every((ids) => ids.size === 1)).toBe(true);
    expect(new Set(receiver.arrivals.map((a) => a.event.id))).toEqual(new Set(stored.map((d) => d._id)));
    // Every attempt of an event carried the same body, the one stored.
    const bodyOf = new Map(stored.map((d) => [d._id as unknown as string, d.body as string]));
    expect(receiver.arrivals.every((a) => a.raw === bodyOf.get(a.event.id))).toBe(true);
    expect(receiver.rejected).toEqual([]);

    const settled = await (async () => {
      for (let i = 0; i < 50; i++) {
        const docs = await events.find({ partnerId: partner.partner_id }).toArray();
        if (docs.every((d) => d.state === "delivered")) return docs;
        await new Promise((r) => setTimeout(r, 200));
      }
      return events.find({ partnerId: partner.partner_id }).toArray();
    })();
    expect(settled.map((d) => d.state)).toEqual(all.map(() => "delivered"));
  }, 150_000);
});
