import { createLogger } from "@pi/common/runtime/logger";
import { SettingsError, parseSettings, type Settings } from "@pi/common/runtime/settings";
import { watchParent } from "@pi/common/runtime/parent-watch";
import { waitFor } from "./infra.js";
import { stateDir } from "./paths.js";
import { startStack } from "./stack.js";

// `npm start`: provisions what is missing, starts the MongoDB-wire server, Kafka and every service as local
// processes, and stays in the foreground until SIGINT or SIGTERM.

const logger = createLogger("local-stack");
let settings: Settings;
try {
  settings = parseSettings();
} catch (err) {
  process.stderr.write(`${err instanceof SettingsError ? err.message : String(err)}\n`);
  process.exit(2);
}
/** A port of the local infrastructure: the one set, or (undefined) a free one. */
function portSetting(name: string): number | undefined {
  const value = process.env[name];
  if (!value) return undefined;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 65535) {
    process.stderr.write(`invalid setting ${name}: must be a port number\n`);
    process.exit(2);
  }
  return Number(value);
}
/**
 * How many processes of a service `npm start` runs (SERVICE_REPLICAS for all, 2 by default, each
 * service's own setting winning): several, so that no state can hide in one process.
 */
function replicaSetting(name: string): number | undefined {
  const value = process.env[name];
  if (!value) return undefined;
  if (!/^[1-8]$/.test(value)) {
    process.stderr.write(`invalid setting ${name}: must be a whole number from 1 to 8\n`);
    process.exit(2);
  }
  return Number(value);
}
const replicas = replicaSetting("SERVICE_REPLICAS") ?? 2;
const dir = stateDir();
const external = Boolean(process.env.MONGODB_URI && process.env.KAFKA_BROKERS);
const progress = (line: string) => logger.info(line);
const startedAt = Date.now();

const stack = await startStack({
  settings,
  stateDir: dir,
  logger,
  mongoPort: portSetting("MONGODB_PORT"),
  kafkaPort: portSetting("KAFKA_PORT"),
  kafkaControllerPort: portSetting("KAFKA_CONTROLLER_PORT"),
  replicas: {
    gateway: replicaSetting("GATEWAY_REPLICAS") ?? replicas,
    auth: replicaSetting("AUTH_REPLICAS") ?? replicas,
    connection: replicaSetting("CONNECTION_REPLICAS") ?? replicas,
    "file-intake": replicaSetting("FILE_INTAKE_REPLICAS") ?? replicas,
    extraction: replicaSetting("EXTRACTION_REPLICAS") ?? replicas,
    webhook: replicaSetting("WEBHOOK_REPLICAS") ?? replicas,
  },
  env: process.env,
  startInfra: !external,
  progress,
}).catch((err) => {
  logger.fatal({ err: (err as Error).message }, "the stack could not start");
  process.exit(1);
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, "stopping the stack");
  const hardStop = setTimeout(() => process.exit(1), 19_000);
  await stack.stop();
  clearTimeout(hardStop);
  logger.info("stopped");
  process.exit(0);
}
process.on("SIGINT", () => void shutdown("SIGINT"));
process.on("SIGTERM", () => void shutdown("SIGTERM"));
watchParent(() => void shutdown("parent exited"), logger);

const readyz = `http://127.0.0.1:${settings.GATEWAY_PORT}/readyz`;
try {
  await waitFor(
    "the gateway's /readyz",
    async () => {
      try {
        return (await fetch(readyz)).status === 200;
      } catch {
        return false;
      }
    },
    120_000,
  );
  logger.info(
    {
      url: `http://127.0.0.1:${settings.GATEWAY_PORT}`,
      stateDir: dir,
      seconds: Math.round((Date.now() - startedAt) / 1000),
    },
    "ready",
  );
} catch (err) {
  logger.error({ err: (err as Error).message, logs: `${dir}/logs` }, "not ready yet; see the logs; still running");
}
