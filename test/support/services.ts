import { randomBytes } from "node:crypto";
import type { DestinationStream } from "pino";
import { createKafka, scramUser, type KafkaCredentials } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { generateIdentity } from "@pi/common/rpc/service-identity";
import { grantKafkaAccess, KAFKA_ADMIN_USER, type KafkaUser } from "@pi/common/events/kafka-access";
import { newDataKeysEntry } from "@pi/common/store/data-keys";
import { parseSettings, type Settings } from "@pi/common/runtime/settings";
import { WORKLOADS, type Workload } from "@pi/common/rpc/allowed-callers";
import type { RunningService } from "@pi/common/runtime/run-service";
import { setConsumerMaxWaitForTests } from "@pi/common/background/consume";
import { startAuthService, type AuthServiceOptions } from "@pi/auth";
import { startConnectionService } from "@pi/connection";
import { startFileIntakeService } from "@pi/file-intake";
import { startExtractionService } from "@pi/extraction";
import { startWebhookService } from "@pi/webhook";
import { startWarmGateway } from "@pi/gateway";

// One key pair per workload for every test in this process, as `npm start` keeps one per state
// directory: each service of a test stack signs its calls with its own key, and a test's own calls
// carry the operator CLI's identity unless it takes another one with `as(settings, name)`.
const identities = Object.fromEntries(WORKLOADS.map((name) => [name, generateIdentity(name)])) as Record<
  Workload,
  { key: string; publicKey: string }
>;
export const TEST_PUBLIC_KEYS = WORKLOADS.map((name) => identities[name].publicKey).join(",");

/** The SERVICE_IDENTITY_KEY of a workload in this process's tests. */
export const identityKey = (name: Workload): string => identities[name].key;

/** The same settings with the identity of another workload (the key its calls are signed with). */
export function as(settings: Settings, name: Workload): Settings {
  return { ...settings, SERVICE_IDENTITY_KEY: identityKey(name) };
}

/** The test Kafka's users and passwords (test/support/global-setup.mjs). */
const kafkaPasswords = (): Record<string, string> =>
  JSON.parse(process.env.TEST_KAFKA_USERS ?? "{}") as Record<string, string>;

/** The test Kafka's super user, for a test's own readers and writers of any topic. */
export const testKafkaAdmin = (): KafkaCredentials => testKafkaUser(KAFKA_ADMIN_USER);

/** A user of the test Kafka: a service's (KAFKA_USERS) or the super user. */
export const testKafkaUser = (name: string): KafkaCredentials => scramUser(name, kafkaPasswords()[name]!);

/** As `as`, and with the service's own Kafka user, whom the broker admits only to its own topics (grantKafkaAccess first). */
export function asService(settings: Settings, name: Workload & KafkaUser): Settings {
  return { ...as(settings, name), ...kafkaUserEnv(name) };
}

/** A service process's own Kafka user, as environment variables (for a service started with `spawn`). */
export function kafkaUserEnv(name: KafkaUser): { KAFKA_USERNAME: string; KAFKA_PASSWORD: string } {
  return { KAFKA_USERNAME: name, KAFKA_PASSWORD: kafkaPasswords()[name]! };
}

/** Grants the Kafka users of every service their ACLs on a namespace of the test Kafka (as the super user). */
export async function grantTestKafkaAccess(namespace: string): Promise<void> {
  await grantKafkaAccess(
    createKafka(process.env.TEST_KAFKA_BROKERS!, "test-admin", createLogger("test-admin", "error"), testKafkaAdmin()),
    namespace,
  );
}

/**
 * Settings for one test: the test infrastructure, a namespace of its own, ports chosen by the OS,
 * every workload's public key and the operator CLI's identity (`as(settings, name)` for another).
 * Kafka as the super user, so that a test may read and write any topic; a test stack's services
 * use their own users (asService).
 */
export function testSettings(overrides: Record<string, string> = {}): Settings {
  return parseSettings({
    SERVICE_IDENTITY_KEY: identityKey("ops"),
    SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS,
    MONGODB_URI: process.env.TEST_MONGODB_URI,
    KAFKA_BROKERS: process.env.TEST_KAFKA_BROKERS,
    KAFKA_USERNAME: KAFKA_ADMIN_USER,
    KAFKA_PASSWORD: kafkaPasswords()[KAFKA_ADMIN_USER],
    DATA_NAMESPACE: `t${randomBytes(5).toString("hex")}`,
    CREDENTIAL_PEPPER: randomBytes(32).toString("base64url"),
    DATA_KEYS: newDataKeysEntry("k1"),
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "error",
    GATEWAY_PORT: "0",
    AUTH_SERVICE_PORT: "0",
    CONNECTION_SERVICE_PORT: "0",
    FILE_INTAKE_SERVICE_PORT: "0",
    WEBHOOK_SERVICE_PORT: "0",
    EXTRACTION_SERVICE_PORT: "0",
    AUTH_ADMIN_PORT: "0",
    CONNECTION_ADMIN_PORT: "0",
    WEBHOOK_ADMIN_PORT: "0",
    METRICS_PORT: "0",
    WEBHOOK_ALLOW_INSECURE_URLS: "true",
    ...overrides,
  });
}

/** The fetch wait of a test stack's Kafka consumers (CONSUMER_MAX_WAIT_MS in a deployment). */
const TEST_CONSUMER_MAX_WAIT_MS = 200;

/**
 * Services started in this process from now on stop without waiting out a 3 s fetch in flight: a
 * fetch returns as soon as a message arrives whatever its wait, so a short one only lets stop()
 * return sooner. Every in-process stack or harness calls it before it starts services.
 */
export function quickConsumerStops(): void {
  setConsumerMaxWaitForTests(TEST_CONSUMER_MAX_WAIT_MS);
}

export interface TestStack {
  settings: Settings;
  baseUrl: string;
  services: Record<"auth" | "connection" | "fileIntake" | "extraction" | "webhook" | "gateway", RunningService>;
  stop(): Promise<void>;
}

const url = (port: number) => `http://127.0.0.1:${port}`;

const SETTING_PREFIX = {
  auth: "AUTH",
  connection: "CONNECTION",
  "file-intake": "FILE_INTAKE",
  webhook: "WEBHOOK",
} as const;

/** The settings that address these started replicas of `service`: its data plane's URL, and its admin plane's when it has one. */
export function addressOf(service: keyof typeof SETTING_PREFIX, ...replicas: RunningService[]): Partial<Settings> {
  const prefix = SETTING_PREFIX[service];
  const admin = replicas.flatMap((r) => (r.adminPort === undefined ? [] : [url(r.adminPort)]));
  return {
    [`${prefix}_SERVICE_URL`]: replicas.map((r) => url(r.port)).join(","),
    ...(admin.length > 0 ? { [`${prefix}_ADMIN_URL`]: admin.join(",") } : {}),
  };
}

export interface TestStackOptions {
  /** Where every service's JSON log lines go (default stdout); tests that read logs pass one. */
  logDestination?: DestinationStream;
  /** The auth service's test seams. */
  auth?: AuthServiceOptions;
}

/**
 * Every service in this process, wired to each other, on the real MongoDB-wire server and Kafka,
 * each with its own service identity; the returned settings carry the operator CLI's.
 */
export async function startTestStack(
  overrides: Record<string, string> = {},
  options: TestStackOptions = {},
): Promise<TestStack> {
  quickConsumerStops();
  let settings = testSettings(overrides);
  const logger = (name: string) => createLogger(name, settings.LOG_LEVEL, options.logDestination);
  await grantTestKafkaAccess(settings.DATA_NAMESPACE);
  const auth = await startAuthService(asService(settings, "auth"), logger("auth"), options.auth);
  const connection = await startConnectionService(asService(settings, "connection"), logger("connection"));
  settings = { ...settings, ...addressOf("auth", auth), ...addressOf("connection", connection) };
  const [fileIntake, webhook] = await Promise.all([
    startFileIntakeService(asService(settings, "file-intake"), logger("file-intake")),
    startWebhookService(asService(settings, "webhook"), logger("webhook")),
  ]);
  settings = { ...settings, ...addressOf("file-intake", fileIntake), ...addressOf("webhook", webhook) };
  const [extraction, gateway] = await Promise.all([
    startExtractionService(asService(settings, "extraction"), logger("extraction")),
    startWarmGateway(asService(settings, "gateway"), logger("gateway")),
  ]);
  const services = { auth, connection, fileIntake, extraction, webhook, gateway };
  return {
    settings,
    baseUrl: url(gateway.port),
    services,
    async stop() {
      await Promise.all([gateway.stop(), extraction.stop()]);
      await Promise.all([fileIntake.stop(), webhook.stop()]);
      await Promise.all([auth.stop(), connection.stop()]);
    },
  };
}

const sharedStacks = new Map<string, Promise<TestStack>>();

/**
 * One stack per distinct set of overrides for all the tests of a file that ask for it: one start-up
 * instead of one per describe block. Its stop() does nothing; the file stops them all at its end
 * with `afterAll(stopSharedStacks)`. Tests on a shared stack keep to their own partners and elders.
 */
export async function sharedTestStack(overrides: Record<string, string> = {}): Promise<TestStack> {
  const key = JSON.stringify(Object.entries(overrides).sort(([a], [b]) => a.localeCompare(b)));
  let started = sharedStacks.get(key);
  if (!started) {
    started = startTestStack(overrides);
    sharedStacks.set(key, started);
  }
  return { ...(await started), stop: async () => {} };
}

/** Stops every stack sharedTestStack started in this file. */
export async function stopSharedStacks(): Promise<void> {
  const started = [...sharedStacks.values()];
  sharedStacks.clear();
  await Promise.all(started.map(async (stack) => (await stack.catch(() => undefined))?.stop()));
}
