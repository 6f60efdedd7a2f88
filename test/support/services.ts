import { randomBytes } from "node:crypto";
import type { DestinationStream } from "pino";
import { createLogger, generateIdentity, newDataKeysEntry, parseSettings, WORKLOADS, type RunningService, type Settings, type Workload } from "@pi/common";
import { startAuthService } from "@pi/auth";
import { startConnectionService } from "@pi/connection";
import { startFileIntakeService } from "@pi/file-intake";
import { startWebhookService } from "@pi/webhook";
import { startWarmGateway } from "@pi/gateway";

// One key pair per workload for every test in this process, as `npm start` keeps one per state
// directory: each service of a test stack signs its calls with its own key, and a test's own calls
// carry the operator CLI's identity unless it takes another one with `as(settings, name)`.
const identities = Object.fromEntries(WORKLOADS.map((name) => [name, generateIdentity(name)])) as Record<Workload, { key: string; publicKey: string }>;
export const TEST_PUBLIC_KEYS = WORKLOADS.map((name) => identities[name].publicKey).join(",");

/** The SERVICE_IDENTITY_KEY of a workload in this process's tests. */
export const identityKey = (name: Workload): string => identities[name].key;

/** The same settings with the identity of another workload (the key its calls are signed with). */
export function as(settings: Settings, name: Workload): Settings {
  return { ...settings, SERVICE_IDENTITY_KEY: identityKey(name) };
}

/**
 * Settings for one test: the test infrastructure, a namespace of its own, ports chosen by the OS,
 * every workload's public key and the operator CLI's identity (`as(settings, name)` for another).
 */
export function testSettings(overrides: Record<string, string> = {}): Settings {
  return parseSettings({
    SERVICE_IDENTITY_KEY: identityKey("ops"),
    SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS,
    MONGODB_URI: process.env.TEST_MONGODB_URI,
    KAFKA_BROKERS: process.env.TEST_KAFKA_BROKERS,
    DATA_NAMESPACE: `t${randomBytes(5).toString("hex")}`,
    CREDENTIAL_PEPPER: randomBytes(32).toString("base64url"),
    DATA_KEYS: newDataKeysEntry("k1"),
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "error",
    GATEWAY_PORT: "0",
    AUTH_SERVICE_PORT: "0",
    CONNECTION_SERVICE_PORT: "0",
    FILE_INTAKE_SERVICE_PORT: "0",
    WEBHOOK_SERVICE_PORT: "0",
    WEBHOOK_ALLOW_INSECURE_URLS: "true",
    ...overrides,
  });
}

export interface TestStack {
  settings: Settings;
  baseUrl: string;
  services: Record<"auth" | "connection" | "fileIntake" | "webhook" | "gateway", RunningService>;
  stop(): Promise<void>;
}

const url = (port: number) => `http://127.0.0.1:${port}`;

export interface TestStackOptions {
  /** Where every service's JSON log lines go (default stdout); tests that read logs pass one. */
  logDestination?: DestinationStream;
}

/**
 * Every service in this process, wired to each other, on the real MongoDB-wire server and Kafka,
 * each with its own service identity; the returned settings carry the operator CLI's.
 */
export async function startTestStack(overrides: Record<string, string> = {}, options: TestStackOptions = {}): Promise<TestStack> {
  let settings = testSettings(overrides);
  const logger = (name: string) => createLogger(name, settings.LOG_LEVEL, options.logDestination);
  const auth = await startAuthService(as(settings, "auth"), logger("auth"));
  const connection = await startConnectionService(as(settings, "connection"), logger("connection"));
  settings = { ...settings, AUTH_SERVICE_URL: url(auth.port), CONNECTION_SERVICE_URL: url(connection.port) };
  const [fileIntake, webhook] = await Promise.all([
    startFileIntakeService(as(settings, "file-intake"), logger("file-intake")),
    startWebhookService(as(settings, "webhook"), logger("webhook")),
  ]);
  settings = { ...settings, FILE_INTAKE_SERVICE_URL: url(fileIntake.port), WEBHOOK_SERVICE_URL: url(webhook.port) };
  const gateway = await startWarmGateway(as(settings, "gateway"), logger("gateway"));
  const services = { auth, connection, fileIntake, webhook, gateway };
  return {
    settings,
    baseUrl: url(gateway.port),
    services,
    async stop() {
      await gateway.stop();
      await Promise.all([fileIntake.stop(), webhook.stop()]);
      await Promise.all([auth.stop(), connection.stop()]);
    },
  };
}
