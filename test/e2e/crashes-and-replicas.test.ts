import { afterAll, afterEach, beforeAll, describe, expect, it } from "@jest/globals";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { startAuthService } from "@pi/auth";
import type { ConnectionClient } from "@pi/common/rpc/clients";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { createKafka, kafkaCredentials, type Producer, topicOffsets } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { SERVICE_URL_SETTINGS } from "../../deploy/local/src/state-files.js";
import { serviceClient } from "@pi/common/rpc/client";
import { topicName } from "@pi/common/events/topics";
import { commonv1, connectionv1, eventsv1 } from "@pi/proto";
import { MongoClient } from "mongodb";
import { type LocalStack, startLocalStack } from "../../bench/support/local-stack.js";
import { drawingOperatorsPdf, hexFlateBombPdf } from "../../services/extraction/test/hostile-pdfs.js";
import { collectConnectionEvents, type EventCollector } from "../support/connection-events.js";
import { readTopic } from "../support/topic-reader.js";
import { sendFile, waitForStatus } from "../support/files.js";
import { textPdf } from "../support/pdf.js";
import { connect, createServer } from "node:net";
import { freePort } from "../support/gateway-process.js";
import { accessToken, call, opsFor, runOpsCli } from "../support/partner-api.js";
import { alive } from "../support/processes.js";
import { everyReplicaServes } from "../support/replicas.js";
import {
  addressOf,
  as,
  grantTestKafkaAccess,
  identityKey,
  kafkaUserEnv,
  quickConsumerStops,
  TEST_PUBLIC_KEYS,
  testKafkaAdmin,
  testSettings,
} from "../support/services.js";
import { startTestReceiver, type TestReceiver } from "../support/webhook-receiver.js";

// Crashes and replicas, the journeys that need the whole system: services killed with SIGKILL
// mid-work and started again (nothing stored is lost), and a local stack as `npm start` runs it
// with two replicas of everything: a stock Prometheus scraping it, then its processes killed
// under a partner's traffic.

describe("connections crash", () => {
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
  const sandboxDelaySeconds = 2;

  interface Child {
    proc: ChildProcess;
    /** The admin port's URL: the operator CLI's (and the caregiver's) calls. */
    adminUrl: string;
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
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      proc.once("exit", (code, signal) => resolve({ code, signal })),
    );
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
      void exited.then(({ code, signal }) =>
        reject(new Error(`connection service exited (${code ?? signal}) before listening: ${logs.join("\n")}`)),
      );
    });
    const child = {
      proc,
      exited,
      adminUrl: `http://127.0.0.1:${adminPort}`,
      // The operator's (and caregiver's) calls on the admin port, and the gateway's (partners' requests).
      client: serviceClient(connectionv1.ConnectionService, `http://127.0.0.1:${adminPort}`, identityKey("ops")),
      partner: serviceClient(connectionv1.ConnectionService, `http://127.0.0.1:${port}`, identityKey("gateway")),
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
    /**
     * A live connection requested of the service through the crash seam, then a caregiver's approval:
     * the approval is stored, then the seam kills the process before the publish.
     */
    async function approvalCutShort(): Promise<{ partnerId: string; id: string }> {
      const faulty = await startService({ crashBeforePublish: true });
      const partnerId = newId("ptr");
      const { address } = await faulty.client.createElder({});
      const { connection } = await faulty.partner.requestConnection({
        partnerId,
        mode: commonv1.Mode.LIVE,
        elderAddress: address,
      });
      const id = connection!.id;
      await expect(faulty.client.approveConnection({ id })).rejects.toThrow();
      expect((await faulty.exited).signal).toBe("SIGKILL");
      return { partnerId, id };
    }

    /** Polls the stored connection until `holds` is true of it or `timeoutMs` has passed; its last state. */
    async function storedConnectionWhen(
      id: string,
      holds: (doc: Record<string, unknown>) => boolean,
      timeoutMs = 30_000,
    ): Promise<Record<string, unknown>> {
      for (const deadline = Date.now() + timeoutMs; ; await sleep(100)) {
        const doc = (await connectionsCollection().findOne({ _id: id as never }))!;
        if (holds(doc) || Date.now() > deadline) return doc;
      }
    }

    it("SIGKILL after a state change is stored and before its event is published: after a restart, exactly that event is on the topic", async () => {
      const { partnerId, id } = await approvalCutShort();

      const doc = await connectionsCollection().findOne({ _id: id as never });
      expect(doc).toMatchObject({ status: "approved", outbox: [{ type: "connection.approved", status: "approved" }] });
      const eventId = (doc!.outbox as { eventId: string }[])[0]!.eventId;
      const kafka = createKafka(
        brokers,
        `${namespace}.crash-test`,
        createLogger("crash-test", "silent"),
        testKafkaAdmin(),
      );
      const admin = kafka.admin();
      const offsets = await topicOffsets(admin, topicName(namespace, "connectionEvents"));
      await admin.close();
      expect(offsets.every((o) => o.high === "0")).toBe(true);

      events = await collectConnectionEvents(brokers, namespace);
      const restarted = await startService();
      await events.waitFor(() => events.of(id).length >= 1);
      expect((await storedConnectionWhen(id, (d) => (d.outbox as unknown[]).length === 0, 5_000)).outbox).toEqual([]);
      await events.sentinel(partnerId);
      expect(events.of(id)).toHaveLength(1);
      expect(events.of(id)[0]).toMatchObject({
        eventId,
        type: "connection.approved",
        partnerId,
        connectionId: id,
        status: "approved",
        mode: commonv1.Mode.LIVE,
      });
      expect(
        (await restarted.partner.getConnection({ partnerId, id, mode: commonv1.Mode.LIVE })).connection!.status,
      ).toBe(connectionv1.ExternalStatus.APPROVED);
    });

    it("SIGKILL after a caregiver's act is stored: its audit record, stored with the change, reaches the audit-events topic after a restart", async () => {
      const { partnerId, id } = await approvalCutShort();
      const stored = (await connectionsCollection().findOne({ _id: id as never }))!.audit as {
        eventId: string;
        action: string;
        actor: string;
      }[];
      const record = stored.find((r) => r.action === "connection.approve")!;
      expect(record).toMatchObject({ actor: "caregiver", eventId: expect.stringMatching(/^evt_/) });

      // Every audit record on the topic, from its beginning.
      const audit = await readTopic(
        brokers,
        namespace,
        "auditEvents",
        (value) => fromBinary(eventsv1.AuditRecordSchema, value),
        { describe: (r) => [r.action, r.id] },
      );
      try {
        await startService();
        // Taken off the document once relayed (acknowledged by the broker), by whichever replica's relay or sweep sent it.
        expect((await storedConnectionWhen(id, (d) => (d.audit as unknown[]).length === 0)).audit).toEqual([]);
        // Then the topic is read up to its end as it stands now: the record is on it, or never will be.
        await audit.readToEnd();
        expect(audit.records.map((r) => r.value).find((r) => r.id === record.eventId)).toMatchObject({
          action: "connection.approve",
          actor: "caregiver",
          service: "connection",
          targets: [id, partnerId, expect.stringMatching(/^eld_/)],
        });
      } finally {
        await audit.stop();
      }
    });

    describe("a caregiver's act during a replica's SIGKILL (two replicas, the operator CLI standing in for the app)", () => {
      const opsState = mkdtempSync(join(tmpdir(), "pi-ops-state-"));
      afterAll(() => rmSync(opsState, { recursive: true, force: true }));

      /** `ops connection ACT ID --json` against the given replicas' admin ports, first listed first asked. */
      function opsAct(act: string, id: string, replicas: Child[]) {
        return runOpsCli(
          {
            PATH: process.env.PATH,
            STATE_DIR: opsState,
            CONNECTION_ADMIN_URL: replicas.map((r) => r.adminUrl).join(","),
            SERVICE_IDENTITY_KEY: identityKey("ops"),
            SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS,
          },
          ["connection", act, id, "--json"],
        );
      }

      async function liveConnection(via: Child): Promise<{ partnerId: string; id: string }> {
        const partnerId = newId("ptr");
        const { address } = await via.client.createElder({});
        const { connection } = await via.partner.requestConnection({
          partnerId,
          mode: commonv1.Mode.LIVE,
          elderAddress: address,
        });
        return { partnerId, id: connection!.id };
      }

      it("killed right after it stored the approval, before it answered: the command succeeds through the twin, which finds the act applied (one write, one event)", async () => {
        const dying = await startService({ crashBeforePublish: true });
        const twin = await startService();
        events ??= await collectConnectionEvents(brokers, namespace);
        const { partnerId, id } = await liveConnection(twin);
        // The CLI lists the twin behind a port that takes connections only once the dying replica has
        // died: grpc-js sends a call to a replica whose connection is up, so the act goes to the dying
        // one first, and the CLI's next attempt reaches the twin once it is let through.
        const twinPort = await freePort();
        const gate = createServer((socket) => {
          const back = connect(Number(new URL(twin.adminUrl).port), "127.0.0.1");
          socket.pipe(back).pipe(socket);
          for (const s of [socket, back]) s.on("error", () => s.destroy());
        });
        void dying.exited.then(() => gate.listen(twinPort, "127.0.0.1"));
        const run = await opsAct("approve", id, [dying, { ...twin, adminUrl: `http://127.0.0.1:${twinPort}` }]).finally(
          () => gate.close(),
        );
        process.stderr.write(
          `[act during SIGKILL] ops connection approve: exit ${run.code} in ${Math.round(run.ms)} ms\n`,
        );
        expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
        expect(JSON.parse(run.stdout)).toEqual({ id, internal_status: "approved" });
        // The first replica asked was the one that died, with the approval stored.
        expect((await dying.exited).signal).toBe("SIGKILL");
        const doc = await connectionsCollection().findOne({ _id: id as never });
        expect(doc).toMatchObject({ status: "approved", version: 1, caregiverActs: [{ status: "approved" }] });
        await events.waitFor(() => events.of(id).length >= 1);
        await events.sentinel(partnerId);
        expect(events.of(id).map((e) => e.type)).toEqual(["connection.approved"]);
      });

      it("killed while its sever waits out a 1.1.0 read lease (a rollout): the command succeeds through the twin, and the connection is revoked once", async () => {
        const dying = await startService();
        const twin = await startService();
        events ??= await collectConnectionEvents(brokers, namespace);
        const { partnerId, id } = await liveConnection(twin);
        await twin.client.approveConnection({ id });
        // As a 1.1.0 replica does under a gateway's polls: a lease renewed until a writer fences it.
        const grant = () =>
          connectionsCollection().updateOne(
            { _id: id as never, fencedUntil: null },
            { $set: { leasedUntil: new Date(Date.now() + 1200) }, $inc: { version: 1 } },
          );
        await grant();
        const sever = opsAct("sever", id, [dying, twin]);
        // The sentinel: the first replica asked has fenced new leases and waits for the granted one.
        for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(20)) {
          if ((await connectionsCollection().findOne({ _id: id as never }))?.fencedUntil instanceof Date) break;
          await grant();
        }
        dying.proc.kill("SIGKILL");
        const run = await sever;
        process.stderr.write(
          `[act during SIGKILL] ops connection sever: exit ${run.code} in ${Math.round(run.ms)} ms\n`,
        );
        expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
        expect(JSON.parse(run.stdout)).toEqual({ id, internal_status: "revoked" });
        expect((await dying.exited).signal).toBe("SIGKILL");
        expect(await connectionsCollection().findOne({ _id: id as never })).toMatchObject({
          status: "revoked",
          caregiverActs: [{ status: "revoked" }],
        });
        await events.waitFor(() => events.of(id).some((e) => e.type === "connection.revoked"));
        await events.sentinel(partnerId);
        expect(events.of(id).map((e) => e.type)).toEqual(["connection.approved", "connection.revoked"]);
      });
    });

    it("sandbox auto-approval falls due while the service is down and happens after its restart", async () => {
      const first = await startService();
      const partnerId = newId("ptr");
      const { sandboxElderAddress } = await first.client.getInfo({});
      const requested = Date.now();
      const { connection } = await first.partner.requestConnection({
        partnerId,
        mode: commonv1.Mode.TEST,
        elderAddress: sandboxElderAddress,
      });
      const id = connection!.id;
      first.proc.kill("SIGKILL");
      await first.exited;
      await sleep(requested + sandboxDelaySeconds * 1000 + 500 - Date.now());
      expect((await connectionsCollection().findOne({ _id: id as never }))!.status).toBe("pending");

      const second = await startService();
      events ??= await collectConnectionEvents(brokers, namespace);
      await events.waitFor(() => events.of(id).length === 1, 60_000);
      expect(Date.now() - requested).toBeLessThan((sandboxDelaySeconds + 60) * 1000);
      expect(events.of(id)[0]).toMatchObject({
        type: "connection.approved",
        status: "approved",
        mode: commonv1.Mode.TEST,
        partnerId,
      });
      const read = await second.partner.getConnection({ partnerId, id, mode: commonv1.Mode.TEST });
      expect(read.connection!.status).toBe(connectionv1.ExternalStatus.APPROVED);
    });
  });
});

describe("webhooks restart", () => {
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
    quickConsumerStops();
    settings = testSettings();
    await grantTestKafkaAccess(settings.DATA_NAMESPACE);
    const logger = createLogger("restart-test", settings.LOG_LEVEL);
    auth = await startAuthService(as(settings, "auth"), logger);
    settings = { ...settings, ...addressOf("auth", auth) };
    producer = createKafka(settings.KAFKA_BROKERS, "restart-test", logger, kafkaCredentials(settings)).producer();
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
      messages: events.map((e) => ({
        key: partnerId,
        value: Buffer.from(toBinary(eventsv1.ConnectionEventSchema, e)),
      })),
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
        idsByConnection.set(
          a.event.data.connection_id,
          (idsByConnection.get(a.event.data.connection_id) ?? new Set()).add(a.event.id),
        );
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
});

describe("replicas and extraction", () => {
  // One local stack as `npm start` runs it (two replicas of every service and of the gateway, its own
  // database and Kafka, free ports) for every test that kills its processes: hostile PDFs and a killed
  // extraction process (issue 23), one replica of each service after the other killed outright under
  // a partner's traffic, no gateway process at all, and last the database and Kafka killed. Each part
  // takes a partner of its own (its token fresh when the part begins).

  let stack: LocalStack;
  let baseUrl = "";

  /** A partner answer is due within this long, whatever fails behind the gateway. */
  const ANSWER_WITHIN_MS = 5_000;
  /** A replica told to stop with Kafka away is gone within this long (its own grace is 15 s, then exit 1). */
  const STOP_WITHIN_MS = 10_000;
  /** Longer than this without an answer is a hang. */
  const HANG_MS = 15_000;

  /** The live processes of one service (both replicas), or of the stack's database ("mongo-wire") or Kafka. */
  function processesOf(service: string): number[] {
    const name = service === "mongo-wire" ? "database" : service;
    return stack
      .processes()
      .filter((p) => p.name === name)
      .map((p) => p.pid);
  }

  async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = await check().catch(() => undefined);
      if (v !== undefined) return v;
      if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms; logs in ${stack.stateDir}/logs`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /**
   * The stack answers /readyz and every replica of every service serves (a replica still starting must
   * not leave the test killing the only one that serves).
   */
  async function ready(timeoutMs: number): Promise<void> {
    await until("the stack ready, every replica serving", timeoutMs, async () => {
      const readyz = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(3_000) });
      return readyz.status === 200 && (await everyReplicaServes(stack.stateDir)) ? true : undefined;
    });
  }

  async function ops(...args: string[]) {
    const r = await runOpsCli({ PATH: process.env.PATH, STATE_DIR: stack.stateDir }, [...args, "--json"]);
    if (r.code !== 0) throw new Error(`ops ${args.join(" ")} failed: ${r.stderr}`);
    return JSON.parse(r.stdout) as Record<string, unknown> & { live: { client_id: string; client_secret: string } };
  }

  interface Partner {
    token: string;
    elder: string;
    connectionId: string;
    clientId: string;
    clientSecret: string;
  }

  /** A partner with a live token and an approved connection to an elder of its own. */
  async function approvedPartner(name: string): Promise<Partner> {
    const created = await ops("partner", "create", "--name", name);
    const elder = (await ops("elder", "create")).address as string;
    const tokenRes = await fetch(`${baseUrl}/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "client_credentials",
        client_id: created.live.client_id,
        client_secret: created.live.client_secret,
      }),
    });
    const token = ((await tokenRes.json()) as { access_token: string }).access_token;
    const con = (await (
      await fetch(`${baseUrl}/v1/connections`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ elder }),
      })
    ).json()) as { id: string };
    await ops("connection", "approve", con.id);
    return {
      token,
      elder,
      connectionId: con.id,
      clientId: created.live.client_id,
      clientSecret: created.live.client_secret,
    };
  }

  // A stock Prometheus (Debian's `prometheus` package) for the "Prometheus against npm start" tests,
  // started with the stack (its discovery file is in the stack's STATE_DIR), so that it has found and
  // scraped the processes by the time the stack is ready.
  const PROMETHEUS = "prometheus";
  const prometheusDir = mkdtempSync(join(tmpdir(), "pi-prometheus-"));
  let prometheus: ChildProcess | undefined;
  let prometheusUrl = "";
  let prometheusStarted: Promise<void> = Promise.resolve();

  async function startPrometheus(stateDir: string): Promise<void> {
    // Installed by .ci/run (`apt-get install prometheus`); without it the Prometheus tests fail, never skip.
    if (spawnSync("sh", ["-c", `command -v ${PROMETHEUS}`]).status !== 0)
      throw new Error("the prometheus binary is missing: apt-get install -y prometheus");
    const port = await freePort();
    prometheusUrl = `http://127.0.0.1:${port}`;
    const config = join(prometheusDir, "prometheus.yml");
    writeFileSync(
      config,
      [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 1s",
        "  evaluation_interval: 1s",
        "scrape_configs:",
        "  - job_name: partner-integration",
        "    file_sd_configs:",
        `      - files: ["${join(stateDir, "prometheus", "targets.json")}"]`,
        "        refresh_interval: 1s",
        "",
      ].join("\n"),
    );
    const log = openSync(join(prometheusDir, "prometheus.log"), "a");
    prometheus = spawn(
      PROMETHEUS,
      [
        `--config.file=${config}`,
        `--storage.tsdb.path=${join(prometheusDir, "data")}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { stdio: ["ignore", log, log] },
    );
    prometheus.once("exit", (code) => {
      if (code !== null && code !== 0)
        process.stderr.write(
          `prometheus exited ${code}:\n${readFileSync(join(prometheusDir, "prometheus.log"), "utf8").slice(-2000)}\n`,
        );
    });
  }

  function stopPrometheus(): void {
    prometheus?.kill("SIGTERM");
    prometheus = undefined;
    rmSync(prometheusDir, { recursive: true, force: true });
  }

  beforeAll(async () => {
    const stateDir = mkdtempSync(join(tmpdir(), "pi-bench-stack-"));
    prometheusStarted = startPrometheus(stateDir);
    // Its failure is the Prometheus tests' (their beforeAll awaits it), not every test's here.
    prometheusStarted.catch(() => undefined);
    stack = await startLocalStack({
      stateDir,
      // The traffic comes from one address at a pace of its own: the limits are not what is measured here.
      env: {
        LOG_LEVEL: "info",
        RATE_LIMIT_TOKEN_PER_MINUTE: "100000",
        RATE_LIMIT_V1_PER_SECOND: "100000",
        WEBHOOK_RETRY_BASE_SECONDS: "0.5",
      },
      readyTimeoutMs: 420_000,
    });
    baseUrl = stack.baseUrl;
    await until("both extraction processes up", 60_000, async () =>
      processesOf("extraction").length === 2 ? true : undefined,
    );
  }, 480_000);

  afterAll(async () => {
    stopPrometheus();
    await stack?.stop();
  }, 90_000);

  describe("two replicas of every service (npm start)", () => {
    it("runs two processes of every service and of the gateway, sharing the one partner port", () => {
      for (const service of ["gateway", "auth", "connection", "file-intake", "extraction", "webhook"])
        expect(processesOf(service)).toHaveLength(2);
      const recorded = JSON.parse(readFileSync(join(stack.stateDir, "stack.json"), "utf8")) as Record<string, string>;
      for (const name of SERVICE_URL_SETTINGS) expect(recorded[name]!.split(",")).toHaveLength(2);
    });

    it("runs extraction nicer than every process that answers partners: background work takes the CPU they leave", () => {
      // Field 19 of /proc/<pid>/stat, the 17th after the command name.
      const niceOf = (pid: number) => {
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
        return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
      };
      const serving = ["gateway", "auth", "connection", "file-intake", "webhook"].flatMap(processesOf).map(niceOf);
      const extraction = processesOf("extraction").map(niceOf);
      expect(extraction).toHaveLength(2);
      for (const nice of extraction) expect(nice).toBeGreaterThan(Math.max(...serving));
    });
  });

  describe("Prometheus against npm start", () => {
    // A stock Prometheus (Debian's `prometheus` package) against `npm start`, as an operator scrapes the
    // local stack (docs/observability.md): it finds every process through the stack's file-based
    // discovery file ($STATE_DIR/prometheus/targets.json), every target is up, and a partner's journey
    // (token, connection, a caregiver's approve and its webhook, an upload and its extraction) moves
    // the counters and histograms an SRE's alerts and dashboard read. Waits poll the query. On this
    // file's npm start, before any of its processes is killed.

    let receiver: TestReceiver;

    type Sample = { metric: Record<string, string>; value: [number, string] };

    async function query(promql: string): Promise<Sample[]> {
      const res = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(promql)}`);
      const body = (await res.json()) as { status: string; error?: string; data?: { result: Sample[] } };
      if (body.status !== "success") throw new Error(`${promql}: ${body.error}`);
      return body.data!.result;
    }

    /** Polls `promql` until `holds` is true of its result (Prometheus scrapes every second). */
    async function eventually(
      promql: string,
      holds: (result: Sample[]) => boolean,
      timeoutMs = 90_000,
    ): Promise<Sample[]> {
      const deadline = Date.now() + timeoutMs;
      let last: Sample[] = [];
      for (;;) {
        try {
          last = await query(promql);
          if (holds(last)) return last;
        } catch (err) {
          if (Date.now() > deadline) throw err;
        }
        if (Date.now() > deadline)
          throw new Error(`${promql} did not hold within ${timeoutMs} ms; last result: ${JSON.stringify(last)}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }

    const value = (result: Sample[]) => Number(result[0]?.value[1] ?? NaN);
    const positive = (result: Sample[]) => result.length > 0 && value(result) > 0;

    beforeAll(async () => {
      await prometheusStarted;
      receiver = await startTestReceiver("");
    }, 400_000);

    afterAll(async () => {
      stopPrometheus();
      await receiver?.close();
    }, 90_000);

    describe("scraping", () => {
      it("finds every process through $STATE_DIR/prometheus/targets.json and scrapes them all (up == 1), the gateway and services on ports of their own", async () => {
        const targets = JSON.parse(readFileSync(join(stack.stateDir, "prometheus", "targets.json"), "utf8")) as {
          targets: string[];
          labels: Record<string, string>;
        }[];
        // Two replicas of each of the six processes npm start runs.
        expect(targets.map((t) => `${t.labels.service}-${t.labels.replica}`).sort()).toEqual(
          ["auth", "connection", "extraction", "file-intake", "gateway", "webhook"]
            .flatMap((s) => [`${s}-1`, `${s}-2`])
            .sort(),
        );
        const ports = targets.map((t) => t.targets[0]!.split(":")[1]);
        expect(new Set(ports).size).toBe(targets.length);
        expect(ports).not.toContain(new URL(stack.baseUrl).port);
        const up = await eventually("up", (r) => r.length === targets.length && r.every((s) => s.value[1] === "1"));
        expect(up.map((s) => s.metric.service).sort()).toEqual(targets.map((t) => t.labels.service).sort());
        // The partner port serves no metrics.
        expect((await fetch(`${stack.baseUrl}/metrics`)).status).toBe(404);
        // Runtime metrics of every process: event-loop delay and heap (GC's after the journey, below).
        for (const name of ["nodejs_eventloop_lag_seconds", "nodejs_heap_size_used_bytes"]) {
          await eventually(`count(${name})`, (r) => value(r) >= targets.length);
        }
      }, 300_000);

      it("a partner's journey moves the request, call, messaging and journey metrics", async () => {
        const ops = opsFor(stack.settings);
        const partner = await ops.partnerCreate({ name: "Metrics Pharmacy", webhookUrl: receiver.url });
        receiver.useSecret(partner.signing_secret);
        const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
        const elder = await ops.elderCreate();
        const con = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
        expect(con.status).toBe(202);
        await ops.connectionAct("approve", con.json!.id as string);
        await receiver.waitFor(
          (arrivals) => arrivals.some((a) => a.event.type === "connection.approved"),
          60_000,
          "the approved webhook",
        );
        // A PDF, which an extraction process reads (a plain text is recorded at its take, by no extraction).
        const upload = await sendFile(
          stack.baseUrl,
          token,
          elder.address,
          textPdf(16_000, "Metformin 500 mg twice a day."),
          { filename: "note.pdf", contentType: "application/pdf" },
        );
        expect(upload.status).toBe(202);
        await waitForStatus(stack.baseUrl, token, upload.json!.id as string, ["processed"]);
        // A refused upload: no file part.
        expect((await call(stack.baseUrl, token, "POST", "/v1/files", {})).status).toBeGreaterThanOrEqual(400);

        // Requests by route template, never a raw path.
        await eventually(
          'sum(http_server_request_duration_seconds_count{http_route="/oauth/token",http_request_method="POST",http_response_status_code="200"})',
          positive,
        );
        await eventually(
          'sum(http_server_request_duration_seconds_count{http_route="/v1/files/{id}",http_request_method="GET"})',
          positive,
        );
        expect(await query('count(http_server_request_duration_seconds_count{http_route=~".*(con|file)_.*"})')).toEqual(
          [],
        );
        // Internal calls on both sides.
        await eventually(
          'sum(rpc_server_call_duration_seconds_count{service="auth",rpc_method="IssueTokens",rpc_grpc_status_code="0"})',
          positive,
        );
        await eventually(
          'sum(rpc_client_call_duration_seconds_count{service="gateway",rpc_method="SubmitFile"})',
          positive,
        );
        // Kafka: the connection event published and consumed, the file event consumed by extraction.
        await eventually('sum(messaging_client_sent_messages_total{service="connection"})', positive);
        await eventually('sum(messaging_client_consumed_messages_total{service="webhook"})', positive);
        await eventually('sum(messaging_process_duration_seconds_count{service="extraction"})', positive);
        // The journey's own.
        await eventually("sum(pi_tokens_issued_total)", positive);
        await eventually('sum(pi_connection_transitions_total{to="approved"})', positive);
        await eventually('sum(pi_webhook_deliveries_total{outcome="delivered"})', positive);
        await eventually("sum(pi_webhook_attempt_duration_seconds_count)", positive);
        await eventually("sum(pi_files_accepted_total)", positive);
        await eventually("sum(pi_files_refused_total)", positive);
        await eventually('sum(pi_extractions_total{outcome="processed"})', positive);
        await eventually('sum(pi_extraction_duration_seconds_count{outcome="processed"})', positive);
        // Gauges every replica reads from the database or Kafka when scraped.
        for (const gauge of [
          "pi_extraction_backlog",
          "pi_webhook_oldest_pending_delivery_age_seconds",
          "pi_webhook_failing_endpoints",
          "pi_storage_quota_max_used_ratio",
          "pi_storage_partners_over_quota_ratio",
          "pi_outbox_oldest_unrelayed_age_seconds",
          "pi_kafka_consumer_lag",
        ]) {
          await eventually(`count(${gauge})`, (r) => value(r) > 0);
        }
        await eventually('max(pi_storage_quota_max_used_ratio{mode="live"})', positive);
        // GC of every process: a process's first collection (and so its series) may come some 20 s
        // after its start, which the journey's time above goes toward.
        await eventually("count(nodejs_gc_duration_seconds_count)", (r) => value(r) >= 12); // the twelve targets
      }, 400_000);

      it("a replica killed outright is restarted on a new metrics port, and the discovery file and Prometheus follow it", async () => {
        const file = join(stack.stateDir, "prometheus", "targets.json");
        type Group = { targets: string[]; labels: Record<string, string> };
        const portOf = () =>
          (JSON.parse(readFileSync(file, "utf8")) as Group[])
            .find((g) => g.labels.service === "webhook" && g.labels.replica === "2")
            ?.targets[0]?.split(":")[1];
        const before = portOf()!;
        // The process that serves that port: its METRICS_PORT, as npm start gave it.
        const victim = stack.processes().find((p) => {
          try {
            return readFileSync(`/proc/${p.pid}/environ`, "utf8").split("\0").includes(`METRICS_PORT=${before}`);
          } catch {
            return false;
          }
        });
        expect(victim?.name).toBe("webhook");
        process.kill(victim!.pid, "SIGKILL");
        const deadline = Date.now() + 60_000;
        while (portOf() === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        const after = portOf();
        expect(after).toBeDefined();
        expect(after).not.toBe(before);
        await eventually(
          `up{service="webhook",replica="2",instance="127.0.0.1:${after}"}`,
          (r) => r.length === 1 && r[0]!.value[1] === "1",
        );
        // The old address is no longer among Prometheus's targets.
        const active = (
          (await (await fetch(`${prometheusUrl}/api/v1/targets?state=active`)).json()) as {
            data: { activeTargets: { scrapeUrl: string }[] };
          }
        ).data.activeTargets;
        expect(active.map((t) => t.scrapeUrl)).toContain(`http://127.0.0.1:${after}/metrics`);
        expect(active.map((t) => t.scrapeUrl)).not.toContain(`http://127.0.0.1:${before}/metrics`);
      }, 240_000);
    });
  });

  describe("extraction as a workload of its own (npm start)", () => {
    // Hostile PDFs end `failed` with their reason while uploads keep answering 202 and no file-intake
    // process restarts; killing an extraction process loses no file.
    let token = "";
    let elder = "";
    beforeAll(async () => {
      ({ token, elder } = await approvedPartner("Extraction Clinic"));
    }, 120_000);

    async function upload(bytes: Buffer, filename: string, contentType: string) {
      return sendFile(baseUrl, token, elder, bytes, { key: randomUUID(), filename, contentType });
    }

    async function fileRecord(id: string) {
      const client = await MongoClient.connect(stack.settings.MONGODB_URI);
      try {
        return await client
          .db(databaseName("pi", "file-intake"))
          .collection("files")
          .findOne({ _id: id as never });
      } finally {
        await client.close();
      }
    }

    async function statusOf(id: string): Promise<string> {
      const res = await fetch(`${baseUrl}/v1/files/${id}`, {
        headers: { authorization: `Bearer ${token}` },
        signal: AbortSignal.timeout(HANG_MS),
      });
      return ((await res.json()) as { status: string }).status;
    }

    describe("hostile PDFs under npm start", () => {
      it("a hex-wrapped Flate bomb (1 GiB decoded) and a 25 MB PDF of millions of drawing operators each end failed within 2 minutes, uploads keep answering 202, no file-intake process restarts", async () => {
        const intakeBefore = processesOf("file-intake").sort();
        expect(intakeBefore).toHaveLength(2);
        const bombPdf = hexFlateBombPdf(1024);
        const drawing = drawingOperatorsPdf(24);
        const sentAt = Date.now();
        const hostile = await Promise.all([
          upload(bombPdf, "bomb.pdf", "application/pdf"),
          upload(drawing, "drawing.pdf", "application/pdf"),
        ]);
        expect(hostile.map((r) => r.status)).toEqual([202, 202]);
        const ids = hostile.map((r) => r.json!.id as string);

        // Uploads while the hostile files are handled: every one answered 202.
        const statuses: number[] = [];
        const done = () => Promise.all(ids.map(statusOf)).then((s) => s.every((x) => x !== "received"));
        while (!(await done()) && Date.now() - sentAt < 120_000) {
          const res = await upload(Buffer.from(`Care note ${randomUUID()}\n`), "note.txt", "text/plain");
          statuses.push(res.status);
        }
        expect(Date.now() - sentAt).toBeLessThan(120_000);
        expect(statuses.length).toBeGreaterThan(0);
        expect(statuses.filter((s) => s !== 202)).toEqual([]);
        // The reason is on the record, a code only: the bomb meets the child's memory ceiling, the
        // page of drawing operators the CPU time a page without text may take.
        for (const [id, failureReason] of [
          [ids[0]!, "memory_limit"],
          [ids[1]!, "time_limit"],
        ]) {
          expect(await statusOf(id!)).toBe("failed");
          expect(await fileRecord(id!)).toMatchObject({ status: "failed", failureReason });
        }
        expect(processesOf("file-intake").sort()).toEqual(intakeBefore);
      }, 300_000);
    });

    describe("an extraction process killed", () => {
      it("loses nothing: every file accepted around the kill ends processed, and uploads keep answering 202", async () => {
        const [victim] = processesOf("extraction");
        expect(victim).toBeDefined();
        const ids: string[] = [];
        for (let i = 0; i < 10; i++) {
          const res = await upload(Buffer.from(`Medication list ${i} ${randomUUID()}\n`), "list.txt", "text/plain");
          expect(res.status).toBe(202);
          ids.push(res.json!.id as string);
          if (i === 4) process.kill(victim!, "SIGKILL");
        }
        // A file the killed process held is taken again once its lease runs out (20 s), by any replica's next take.
        for (const id of ids)
          expect(
            await until(`file ${id} processed`, 120_000, async () =>
              (await statusOf(id)) === "processed" ? true : undefined,
            ),
          ).toBe(true);
      }, 180_000);
    });
  });

  describe("a replica of each service killed in turn (npm start)", () => {
    let partner: Partner;
    const accepted = new Map<string, string>(); // file id -> Idempotency-Key
    beforeAll(async () => {
      partner = await approvedPartner("Chaos Pharmacy");
    }, 120_000);

    interface Outcome {
      phase: string;
      op: string;
      status: number | "reset" | "hang";
      ms: number;
      envelope503?: boolean;
    }

    /** One partner request: its status, or "reset" (the connection to a killed gateway dropped), or "hang". */
    async function timed(
      phaseNow: () => string,
      op: string,
      outcomes: Outcome[],
      send: (signal: AbortSignal) => Promise<Response | { status: number; text: string; headers: Headers }>,
    ) {
      const phase = phaseNow();
      const started = Date.now();
      let outcome: Outcome;
      try {
        const signal = AbortSignal.timeout(HANG_MS);
        const res = await Promise.race([
          send(signal),
          new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason))),
        ]);
        const text = "text" in res && typeof res.text === "string" ? res.text : await (res as Response).text();
        outcome = { phase, op, status: res.status, ms: Date.now() - started };
        // A failure counts in the phase it happened in (an upload begun just before a replica was killed).
        if (res.status >= 500) outcome.phase = phaseNow();
        if (res.status === 503) {
          const body = JSON.parse(text) as { error?: { code?: string } };
          outcome.envelope503 = body.error?.code === "service_unavailable" && res.headers.get("retry-after") === "1";
        }
        outcome.ms = Date.now() - started;
        outcomes.push(outcome);
        return { status: res.status, text };
      } catch (err) {
        const name = (err as Error).name;
        // A dropped connection counts in the phase it dropped in (a request begun just before a gateway was killed).
        outcome = {
          phase: phaseNow(),
          op,
          status: name === "TimeoutError" || name === "AbortError" ? "hang" : "reset",
          ms: Date.now() - started,
        };
        outcomes.push(outcome);
        return { status: outcome.status, text: "" };
      }
    }

    /** A partner at work: tokens, connection requests and reads, uploads and their status, until stopped. */
    async function partnerTraffic(phase: () => string, stopped: () => boolean, outcomes: Outcome[]): Promise<void> {
      const json = { "content-type": "application/json", authorization: `Bearer ${partner.token}` };
      for (let n = 0; !stopped(); n++) {
        switch (n % 4) {
          case 0:
            await timed(phase, "token", outcomes, (signal) =>
              fetch(`${baseUrl}/oauth/token`, {
                method: "POST",
                signal,
                headers: { "content-type": "application/x-www-form-urlencoded" },
                body: new URLSearchParams({
                  grant_type: "client_credentials",
                  client_id: partner.clientId,
                  client_secret: partner.clientSecret,
                }),
              }),
            );
            break;
          case 1:
            await timed(phase, "connect", outcomes, (signal) =>
              fetch(`${baseUrl}/v1/connections`, {
                method: "POST",
                signal,
                headers: json,
                body: JSON.stringify({ elder: partner.elder }),
              }),
            );
            break;
          case 2:
            await timed(phase, "read connection", outcomes, (signal) =>
              fetch(`${baseUrl}/v1/connections/${partner.connectionId}`, { signal, headers: json }),
            );
            break;
          case 3: {
            // An upload is retried with its Idempotency-Key until accepted, as a partner would after a 503.
            const key = randomUUID();
            for (let attempt = 0; attempt < 20; attempt++) {
              const res = await timed(phase, "upload", outcomes, () =>
                sendFile(baseUrl, partner.token, partner.elder, Buffer.from(`Medication list ${key}\n`), {
                  key,
                  filename: "list.txt",
                  contentType: "text/plain",
                }),
              );
              if (res.status === 202) {
                const id = (JSON.parse(res.text) as { id: string }).id;
                accepted.set(id, key);
                await timed(phase, "read file", outcomes, (signal) =>
                  fetch(`${baseUrl}/v1/files/${id}`, { signal, headers: json }),
                );
                break;
              }
              await new Promise((r) => setTimeout(r, 200));
            }
            break;
          }
        }
      }
    }

    it("a replica of each service killed in turn under a partner's traffic: no 5xx, no hang, nothing lost", async () => {
      const outcomes: Outcome[] = [];
      let phase = "steady";
      let stopped = false;
      const traffic = Promise.all(
        Array.from({ length: 3 }, () =>
          partnerTraffic(
            () => phase,
            () => stopped,
            outcomes,
          ),
        ),
      );
      /** Sentinel for "traffic went on in this phase": this many partner answers (or resets) counted in it. */
      const answeredIn = (name: string, n: number) =>
        until(`${n} answers in phase "${name}"`, 60_000, async () =>
          outcomes.filter((o) => o.phase === name).length >= n ? true : undefined,
        );
      try {
        await answeredIn(phase, 20);
        for (const service of ["auth", "connection", "file-intake", "extraction", "webhook", "gateway"]) {
          const [victim] = processesOf(service);
          expect(victim).toBeDefined();
          phase = `${service} killed`;
          process.kill(victim!, "SIGKILL");
          // Traffic goes on while the replica is gone and while it comes back.
          await until(`the killed ${service} replica gone`, 10_000, async () => (alive(victim!) ? undefined : true));
          await answeredIn(phase, 20);
          await until(`the ${service} replica restarted`, 60_000, async () =>
            processesOf(service).length === 2 ? true : undefined,
          );
          await ready(120_000);
          phase = `${service} back`;
          await answeredIn(phase, 10);
        }
      } finally {
        stopped = true;
        await traffic;
      }

      const summary = Object.entries(
        outcomes.reduce<Record<string, Record<string, number>>>((acc, o) => {
          const phase = acc[o.phase] ?? {};
          acc[o.phase] = phase;
          phase[`${o.op} ${o.status}`] = (phase[`${o.op} ${o.status}`] ?? 0) + 1;
          return acc;
        }, {}),
      );
      process.stderr.write(`[replicas-failover] ${JSON.stringify(summary)}\n`);
      expect(outcomes.filter((o) => o.status === "hang")).toEqual([]);
      // An upload under way on the file-intake replica that died fails fast with the envelope 503
      // (a stream cannot be replayed; the partner's retry with the same key is accepted). Nothing else
      // answers 5xx.
      const fiveHundreds = outcomes.filter((o) => typeof o.status === "number" && o.status >= 500);
      expect(
        fiveHundreds.filter(
          (o) =>
            !(
              o.op === "upload" &&
              o.phase === "file-intake killed" &&
              o.status === 503 &&
              o.envelope503 &&
              o.ms < ANSWER_WITHIN_MS
            ),
        ),
      ).toEqual([]);
      // A partner connection to the gateway process that was killed drops; nowhere else.
      expect(outcomes.filter((o) => o.status === "reset" && o.phase !== "gateway killed")).toEqual([]);
      expect(outcomes.filter((o) => o.status === 200 || o.status === 202).length).toBeGreaterThan(40);

      // Nothing lost: every accepted upload is there.
      expect(accepted.size).toBeGreaterThan(5);
      for (const id of accepted.keys())
        expect(
          (await fetch(`${baseUrl}/v1/files/${id}`, { headers: { authorization: `Bearer ${partner.token}` } })).status,
        ).toBe(200);
    }, 420_000);

    describe("no gateway process running", () => {
      /** Longer than this without an answer is a hang (the partner port with no process behind it). */
      const NO_GATEWAY_HANG_MS = 10_000;

      it("a request then is refused or reset at once, never left hanging", async () => {
        const gateways = processesOf("gateway");
        expect(gateways).toHaveLength(2);
        const outcomes: { ms: number; outcome: string }[] = [];
        let stop = false;
        const client = async () => {
          while (!stop) {
            const started = Date.now();
            try {
              const res = await fetch(`${baseUrl}/healthz`, {
                signal: AbortSignal.timeout(NO_GATEWAY_HANG_MS),
                headers: { connection: "close" },
              });
              await res.text();
              outcomes.push({ ms: Date.now() - started, outcome: String(res.status) });
            } catch (err) {
              outcomes.push({
                ms: Date.now() - started,
                outcome: (err as Error).name === "TimeoutError" ? "hang" : "refused or reset",
              });
            }
          }
        };
        const clients = Array.from({ length: 8 }, client);
        while (outcomes.length < 50) await new Promise((r) => setTimeout(r, 20));
        for (const pid of gateways) process.kill(pid, "SIGKILL");
        const killedAt = Date.now();
        await until("a refused or reset request", 10_000, async () =>
          outcomes.some((o) => o.outcome === "refused or reset") ? true : undefined,
        );
        // Until the supervisor has both back and they answer again.
        await until("the gateways back", 60_000, async () =>
          processesOf("gateway").length === 2 &&
          outcomes.slice(-20).every((o) => o.outcome === "200") &&
          Date.now() - killedAt > 2_000
            ? true
            : undefined,
        );
        stop = true;
        await Promise.all(clients);
        expect(outcomes.filter((o) => o.outcome === "hang")).toEqual([]);
        expect(Math.max(...outcomes.map((o) => o.ms))).toBeLessThan(NO_GATEWAY_HANG_MS);
      }, 120_000);
    });

    it.each(["mongo-wire", "kafka"])(
      "with %s killed, every partner answer comes within 5 s: a success or the envelope 503",
      async (infra) => {
        const outcomes: Outcome[] = [];
        let stopped = false;
        const [victim] = processesOf(infra);
        expect(victim).toBeDefined();
        process.kill(victim!, "SIGKILL");
        const traffic = Promise.all(
          Array.from({ length: 3 }, () =>
            partnerTraffic(
              () => `${infra} killed`,
              () => stopped,
              outcomes,
            ),
          ),
        );
        // Kept down for the whole window: the stack restarts it after 0.5 s, and on a fast machine the
        // database was back before any request needed it (no 503 at all in 6 s).
        const outageEnds = Date.now() + 6_000;
        while (Date.now() < outageEnds) {
          for (const pid of processesOf(infra)) process.kill(pid, "SIGKILL");
          await new Promise((r) => setTimeout(r, 100));
        }
        stopped = true;
        await traffic;
        process.stderr.write(
          `[replicas-failover] ${infra}: ${JSON.stringify(outcomes.map((o) => `${o.op} ${o.status} ${o.ms}ms`))}\n`,
        );
        expect(outcomes.length).toBeGreaterThan(3);
        expect(outcomes.filter((o) => o.status === "hang" || o.status === "reset")).toEqual([]);
        expect(outcomes.filter((o) => o.ms >= ANSWER_WITHIN_MS)).toEqual([]);
        expect(
          outcomes.filter((o) => o.status !== 200 && o.status !== 202 && !(o.status === 503 && o.envelope503)),
        ).toEqual([]);
        if (infra === "mongo-wire") {
          expect(outcomes.filter((o) => o.status === 503).length).toBeGreaterThan(0);
          await ready(120_000);
        } else {
          // The gateway pods' readiness probe leaves Kafka out, as the internal services' does (health
          // check "traffic"): writes wait in the outboxes, so no replica leaves its Service. The stack as
          // a whole (the operator contract's /readyz) is not ready.
          const traffic = await fetch(`${baseUrl}/readyz/traffic`, { signal: AbortSignal.timeout(3_000) });
          expect(traffic.status).toBe(200);
          const whole = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(5_000) });
          expect([whole.status, ((await whole.json()) as { failing: string[] }).failing.sort()]).toEqual([
            503,
            ["auth", "connection", "file-intake", "webhook"],
          ]);
          // A replica told to stop while Kafka is away (every pod of a release stops at once on
          // uninstall) stops well within its 15 s grace, which it would otherwise spend waiting on its
          // consumers' reconnects and then exit 1. (Kafka killed again, should the stack have restarted it.)
          for (const pid of processesOf("kafka")) process.kill(pid, "SIGKILL");
          const stopping = ["auth", "webhook", "gateway"].map((service) => {
            const [pid] = processesOf(service);
            process.kill(pid!, "SIGTERM");
            return { service, pid: pid!, at: Date.now() };
          });
          const stopped = await Promise.all(
            stopping.map(async ({ service, pid, at }) => {
              while (alive(pid) && Date.now() - at < 20_000) await new Promise((r) => setTimeout(r, 100));
              return [service, Date.now() - at < STOP_WITHIN_MS] as const;
            }),
          );
          expect(stopped).toEqual(stopping.map(({ service }) => [service, true]));
        }
      },
      300_000,
    );
  });
});
