import { randomBytes } from "node:crypto";
import type { DestinationStream } from "pino";
import { createLogger, newDataKeysEntry, parseSettings, type RunningService, type Settings } from "@pi/common";
import { startAuthService } from "@pi/auth";
import { startConnectionService } from "@pi/connection";
import { startFileIntakeService } from "@pi/file-intake";
import { startWebhookService } from "@pi/webhook";
import { startWarmGateway } from "@pi/gateway";

/** Settings for one test: the test infrastructure, a namespace of its own, ports chosen by the OS. */
export function testSettings(overrides: Record<string, string> = {}): Settings {
  return parseSettings({
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

/** Every service in this process, wired to each other, on the real MongoDB-wire server and Kafka. */
export async function startTestStack(overrides: Record<string, string> = {}, options: TestStackOptions = {}): Promise<TestStack> {
  let settings = testSettings(overrides);
  const logger = (name: string) => createLogger(name, settings.LOG_LEVEL, options.logDestination);
  const auth = await startAuthService(settings, logger("auth"));
  const connection = await startConnectionService(settings, logger("connection"));
  settings = { ...settings, AUTH_SERVICE_URL: url(auth.port), CONNECTION_SERVICE_URL: url(connection.port) };
  const [fileIntake, webhook] = await Promise.all([
    startFileIntakeService(settings, logger("file-intake")),
    startWebhookService(settings, logger("webhook")),
  ]);
  settings = { ...settings, FILE_INTAKE_SERVICE_URL: url(fileIntake.port), WEBHOOK_SERVICE_URL: url(webhook.port) };
  const gateway = await startWarmGateway(settings, logger("gateway"));
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
