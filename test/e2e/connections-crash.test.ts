import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { fromBinary } from "@bufbuild/protobuf";
import { createKafka, createLogger, databaseName, newId, serviceClient, topicName, type ConnectionClient } from "@pi/common";
import { commonv1, connectionv1, eventsv1 } from "@pi/proto";
import { collectConnectionEvents, type EventCollector } from "../support/connection-events.js";
import { grantTestKafkaAccess, identityKey, kafkaUserEnv, TEST_PUBLIC_KEYS, testKafkaAdmin } from "../support/services.js";

// The connection service as a real process (the compiled dist/main.js), killed with SIGKILL, then
// started again on the same database: nothing stored may be lost, neither an event between the
// write and the publish (nor the change's audit record), nor a sandbox approval that fell due while
// the service was down.

const root = fileURLToPath(new URL("../..", import.meta.url));
const main = join(root, "services", "connection", "dist", "main.js");
/** The same service with the test seam that kills it between a stored event and its publish. */
const crashingMain = join(root, "test", "support", "connection-crash-main.mjs");
const namespace = `t${randomBytes(5).toString("hex")}`;
const mongoUri = process.env.TEST_MONGODB_URI!;
const brokers = process.env.TEST_KAFKA_BROKERS!;
const sandboxDelaySeconds = 3;

interface Child {
  proc: ChildProcess;
  client: ConnectionClient;
  partner: ConnectionClient;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}
const children: Child[] = [];

/**
 * Starts `node services/connection/dist/main.js` and resolves once it listens; with `crashBeforePublish`,
 * the same service through the test seam that SIGKILLs it after the first write that stores an event.
 */
async function startService({ crashBeforePublish = false } = {}): Promise<Child> {
  const proc = spawn(process.execPath, [crashBeforePublish ? crashingMain : main], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      MONGODB_URI: mongoUri,
      KAFKA_BROKERS: brokers,
      DATA_NAMESPACE: namespace,
      CONNECTION_SERVICE_PORT: "0",
      CONNECTION_ADMIN_PORT: "0",
      METRICS_PORT: "0",
      SANDBOX_APPROVAL_DELAY_SECONDS: String(sandboxDelaySeconds),
      LOG_LEVEL: "info",
      KAFKAJS_NO_PARTITIONER_WARNING: "1",
      SERVICE_IDENTITY_KEY: identityKey("connection"),
      SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS,
      ...kafkaUserEnv("connection"),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })));
  const logs: string[] = [];
  proc.stderr!.on("data", (chunk: Buffer) => logs.push(chunk.toString()));
  const { port, adminPort } = await new Promise<{ port: number; adminPort: number }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`connection service did not start: ${logs.join("")}`)), 30_000);
    createInterface({ input: proc.stdout! }).on("line", (line) => {
      logs.push(line);
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number; adminPort?: number };
        if (entry.msg === "started" && entry.port && entry.adminPort) {
          clearTimeout(timer);
          resolve({ port: entry.port, adminPort: entry.adminPort });
        }
      } catch {
        // not a log line
      }
    });
    void exited.then(({ code, signal }) => reject(new Error(`connection service exited (${code ?? signal}) before listening: ${logs.join("\n")}`)));
  });
  const child = {
    proc,
    exited,
    // The operator's (and caregiver's) calls on the admin port, and the gateway's (partners' requests).
    client: serviceClient(connectionv1.ConnectionService, `http://127.0.0.1:${adminPort}`, [], identityKey("ops")),
    partner: serviceClient(connectionv1.ConnectionService, `http://127.0.0.1:${port}`, [], identityKey("gateway")),
  };
  children.push(child);
  return child;
}

let mongo: MongoClient;
let events: EventCollector;
const connectionsCollection = () => mongo.db(databaseName(namespace, "connection")).collection("connections");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  // This test runs the compiled service: a build older than the sources would test old code.
  expect(existsSync(main)).toBe(true);
  for (const file of ["outbox", "connections", "state-machine", "routes", "service", "audit"]) {
    const src = statSync(join(root, "services", "connection", "src", `${file}.ts`)).mtimeMs;
    const built = statSync(join(root, "services", "connection", "dist", `${file}.js`)).mtimeMs;
    if (built < src) throw new Error(`services/connection/dist is older than src/${file}.ts: run npx tsc -b first`);
  }
  await grantTestKafkaAccess(namespace);
  mongo = await MongoClient.connect(mongoUri);
});

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.proc.exitCode === null && child.proc.signalCode === null) {
      child.proc.kill("SIGTERM");
      await child.exited;
    }
  }
});

afterAll(async () => {
  await events?.stop();
  await mongo?.db(databaseName(namespace, "connection")).dropDatabase();
  await mongo?.close();
});

describe("connection service crash", () => {
  it("SIGKILL after a state change is stored and before its event is published: after a restart, exactly that event is on the topic", async () => {
    const faulty = await startService({ crashBeforePublish: true });
    const partnerId = newId("ptr");
    const { address } = await faulty.client.createElder({});
    const { connection } = await faulty.partner.requestConnection({ partnerId, mode: commonv1.Mode.LIVE, elderAddress: address });
    const id = connection!.id;

    // The approval is stored, then the seam kills the process before the publish.
    await expect(faulty.client.approveConnection({ id })).rejects.toThrow();
    expect((await faulty.exited).signal).toBe("SIGKILL");

    const doc = await connectionsCollection().findOne({ _id: id as never });
    expect(doc).toMatchObject({ status: "approved", outbox: [{ type: "connection.approved", status: "approved" }] });
    const eventId = (doc!.outbox as { eventId: string }[])[0]!.eventId;
    const kafka = createKafka(brokers, `${namespace}.crash-test`, createLogger("crash-test", "silent"), testKafkaAdmin());
    const admin = kafka.admin();
    await admin.connect();
    const offsets = await admin.fetchTopicOffsets(topicName(namespace, "connectionEvents"));
    await admin.disconnect();
    expect(offsets.every((o) => o.high === "0")).toBe(true);

    events = await collectConnectionEvents(brokers, namespace);
    const restarted = await startService();
    await events.waitFor(() => events.of(id).length >= 1);
    for (let i = 0; i < 50 && ((await connectionsCollection().findOne({ _id: id as never }))!.outbox as unknown[]).length > 0; i++) await sleep(100);
    expect((await connectionsCollection().findOne({ _id: id as never }))!.outbox).toEqual([]);
    await events.sentinel(partnerId);
    expect(events.of(id)).toHaveLength(1);
    expect(events.of(id)[0]).toMatchObject({ eventId, type: "connection.approved", partnerId, connectionId: id, status: "approved", mode: commonv1.Mode.LIVE });
    expect((await restarted.partner.getConnection({ partnerId, id, mode: commonv1.Mode.LIVE })).connection!.status).toBe(connectionv1.ExternalStatus.APPROVED);
  });

  it("SIGKILL after a caregiver's act is stored: its audit record, stored with the change, reaches the audit-events topic after a restart", async () => {
    const faulty = await startService({ crashBeforePublish: true });
    const partnerId = newId("ptr");
    const { address } = await faulty.client.createElder({});
    const { connection } = await faulty.partner.requestConnection({ partnerId, mode: commonv1.Mode.LIVE, elderAddress: address });
    const id = connection!.id;
    await expect(faulty.client.approveConnection({ id })).rejects.toThrow();
    expect((await faulty.exited).signal).toBe("SIGKILL");
    const stored = (await connectionsCollection().findOne({ _id: id as never }))!.audit as { eventId: string; action: string; actor: string }[];
    const record = stored.find((r) => r.action === "connection.approve")!;
    expect(record).toMatchObject({ actor: "caregiver", eventId: expect.stringMatching(/^evt_/) });

    // Every audit record on the topic, from its beginning.
    const seen: eventsv1.AuditRecord[] = [];
    const kafka = createKafka(brokers, `${namespace}.audit-reader`, createLogger("audit-reader", "silent"), testKafkaAdmin());
    const reader = kafka.consumer({ groupId: `${namespace}.audit-reader.${randomBytes(4).toString("hex")}`, maxWaitTimeInMs: 100 });
    await reader.connect();
    try {
      await reader.subscribe({ topic: topicName(namespace, "auditEvents"), fromBeginning: true });
      await reader.run({ eachMessage: async ({ message }) => void seen.push(fromBinary(eventsv1.AuditRecordSchema, message.value!)) });
      await startService();
      for (const deadline = Date.now() + 30_000; !seen.some((r) => r.id === record.eventId) && Date.now() < deadline; ) await sleep(100);
      expect(seen.find((r) => r.id === record.eventId)).toMatchObject({ action: "connection.approve", actor: "caregiver", service: "connection", targets: [id, partnerId, expect.stringMatching(/^eld_/)] });
      // Taken off the document once relayed, by whichever replica's relay or sweep (every 5 s) sent it.
      for (const deadline = Date.now() + 30_000; ((await connectionsCollection().findOne({ _id: id as never }))!.audit as unknown[]).length > 0 && Date.now() < deadline; ) await sleep(100);
      expect((await connectionsCollection().findOne({ _id: id as never }))!.audit).toEqual([]);
    } finally {
      await reader.disconnect();
    }
  });

  it("sandbox auto-approval falls due while the service is down and happens after its restart", async () => {
    const first = await startService();
    const partnerId = newId("ptr");
    const { sandboxElderAddress } = await first.client.getInfo({});
    const requested = Date.now();
    const { connection } = await first.partner.requestConnection({ partnerId, mode: commonv1.Mode.TEST, elderAddress: sandboxElderAddress });
    const id = connection!.id;
    first.proc.kill("SIGKILL");
    await first.exited;
    await sleep(requested + sandboxDelaySeconds * 1000 + 500 - Date.now());
    expect((await connectionsCollection().findOne({ _id: id as never }))!.status).toBe("pending");

    const second = await startService();
    events ??= await collectConnectionEvents(brokers, namespace);
    await events.waitFor(() => events.of(id).length === 1, 60_000);
    expect(Date.now() - requested).toBeLessThan((sandboxDelaySeconds + 60) * 1000);
    expect(events.of(id)[0]).toMatchObject({ type: "connection.approved", status: "approved", mode: commonv1.Mode.TEST, partnerId });
    const read = await second.partner.getConnection({ partnerId, id, mode: commonv1.Mode.TEST });
    expect(read.connection!.status).toBe(connectionv1.ExternalStatus.APPROVED);
  });
});
