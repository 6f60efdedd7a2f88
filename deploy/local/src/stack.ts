import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createKafka, ensureTopics, type Logger, type Settings } from "@pi/common";
import { ensureKafka, ensureMongoWire, mongoWireSpec, kafkaSpec, portOpen, waitFor } from "./infra.js";
import { cacheDir, repoRoot } from "./paths.js";
import { Supervisor } from "./supervisor.js";

export const SERVICES = ["auth", "connection", "file-intake", "webhook", "gateway"] as const;

export interface StackOptions {
  settings: Settings;
  stateDir: string;
  logger: Logger;
  /** Ports of the local infrastructure; ignored when external MONGODB_URI / KAFKA_BROKERS are given. */
  mongoPort: number;
  kafkaPort: number;
  kafkaControllerPort: number;
  /** Start the MongoDB-wire server and Kafka here (false: use MONGODB_URI and KAFKA_BROKERS as they are). */
  startInfra: boolean;
  progress: (line: string) => void;
}

/** Secrets the local stack generates once and keeps under the state directory. */
function localSecrets(stateDir: string): { CREDENTIAL_PEPPER: string } {
  const file = join(stateDir, "secrets.json");
  if (!existsSync(file)) {
    writeFileSync(file, JSON.stringify({ CREDENTIAL_PEPPER: randomBytes(32).toString("base64url") }), { mode: 0o600 });
  }
  return JSON.parse(readFileSync(file, "utf8")) as { CREDENTIAL_PEPPER: string };
}

export interface RunningStack {
  supervisor: Supervisor;
  env: NodeJS.ProcessEnv;
  stop(): Promise<void>;
}

export async function startStack(opts: StackOptions): Promise<RunningStack> {
  const { stateDir, logger, progress } = opts;
  const logDir = join(stateDir, "logs");
  mkdirSync(logDir, { recursive: true });
  const supervisor = new Supervisor(logger);
  const env: NodeJS.ProcessEnv = {
    ...localSecrets(stateDir),
    WEBHOOK_ALLOW_INSECURE_URLS: process.env.WEBHOOK_ALLOW_INSECURE_URLS ?? "true",
    KAFKAJS_NO_PARTITIONER_WARNING: "1",
  };

  if (opts.startInfra) {
    const cache = cacheDir();
    const mongoWire = ensureMongoWire(cache, progress);
    const kafkaLibs = ensureKafka(cache, progress);
    if (await portOpen(opts.mongoPort)) throw new Error(`port ${opts.mongoPort} (MongoDB) is already in use; stop what holds it or set MONGODB_PORT`);
    if (await portOpen(opts.kafkaPort)) throw new Error(`port ${opts.kafkaPort} (Kafka) is already in use; stop what holds it or set KAFKA_PORT`);
    progress("starting the MongoDB-wire server and Kafka");
    supervisor.start(mongoWireSpec(mongoWire, join(stateDir, "mongo-wire"), opts.mongoPort, logDir));
    supervisor.start(kafkaSpec(kafkaLibs, join(stateDir, "kafka"), opts.kafkaPort, opts.kafkaControllerPort, logDir));
    env.MONGODB_URI = `mongodb://127.0.0.1:${opts.mongoPort}/`;
    env.KAFKA_BROKERS = `127.0.0.1:${opts.kafkaPort}`;
    await waitFor("the MongoDB-wire server", () => portOpen(opts.mongoPort), 30_000);
    await waitFor("Kafka", () => portOpen(opts.kafkaPort), 90_000);
  }
  const brokers = env.KAFKA_BROKERS ?? opts.settings.KAFKA_BROKERS;
  progress("creating Kafka topics");
  await ensureTopics(createKafka(brokers, "local-stack", logger), opts.settings.DATA_NAMESPACE);

  progress(`starting services: ${SERVICES.join(", ")}`);
  for (const name of SERVICES) {
    supervisor.start({
      name,
      command: process.execPath,
      args: ["--enable-source-maps", join(repoRoot, "services", name, "dist", "main.js")],
      env,
      logFile: join(logDir, `${name}.log`),
    });
  }
  return {
    supervisor,
    env,
    // Gateway first (stops taking requests), then the services, then the infrastructure.
    stop: () => supervisor.stop([["gateway"], ["auth", "connection", "file-intake", "webhook"], ["kafka", "mongo-wire"]]),
  };
}
