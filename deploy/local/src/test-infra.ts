import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cacheDir, repoRoot } from "./paths.js";
import { KAFKA_ADMIN_USER, KAFKA_USERS } from "@pi/common/events/kafka-access";
import {
  ensureKafka,
  ensureMongoWire,
  localKafkaUsers,
  mongoWireSpec,
  kafkaSpec,
  portOpen,
  spawnLogged,
  waitFor,
  type KafkaUserPasswords,
} from "./infra.js";

// The MongoDB-wire server and Kafka every integration test talks to: started by the test run when they are
// not already running (on their own ports, apart from a dev `npm start`), stopped by it after.
export const TEST_INFRA = {
  mongoPort: Number(process.env.TEST_MONGODB_PORT ?? 37017),
  kafkaPort: Number(process.env.TEST_KAFKA_PORT ?? 39092),
  kafkaControllerPort: Number(process.env.TEST_KAFKA_CONTROLLER_PORT ?? 39093),
  dir: join(repoRoot, ".state", "test-infra"),
};

export const testMongoUri = () => `mongodb://127.0.0.1:${TEST_INFRA.mongoPort}/`;
export const testKafkaBrokers = () => `127.0.0.1:${TEST_INFRA.kafkaPort}`;
/** The Kafka users' passwords (the super user's and every service's), kept beside the test infrastructure. */
export const testKafkaUsers = (): KafkaUserPasswords =>
  localKafkaUsers(join(TEST_INFRA.dir, "kafka-users.json"), [KAFKA_ADMIN_USER, ...KAFKA_USERS]);

const pidFile = join(TEST_INFRA.dir, "pids.json");
const progress = (line: string) => process.stderr.write(`[test-infra] ${line}\n`);

/** Starts the test infrastructure unless it already runs; true when this call started it. */
export async function ensureTestInfra(): Promise<boolean> {
  const [mongoUp, kafkaUp] = await Promise.all([portOpen(TEST_INFRA.mongoPort), portOpen(TEST_INFRA.kafkaPort)]);
  if (mongoUp && kafkaUp) {
    progress(`reusing the MongoDB-wire server on ${TEST_INFRA.mongoPort} and Kafka on ${TEST_INFRA.kafkaPort}`);
    return false;
  }
  if (mongoUp || kafkaUp) stopTestInfra();
  const cache = cacheDir();
  const mongoWire = ensureMongoWire(cache, progress);
  const kafkaLibs = ensureKafka(cache, progress);
  rmSync(TEST_INFRA.dir, { recursive: true, force: true });
  const logs = join(TEST_INFRA.dir, "logs");
  mkdirSync(logs, { recursive: true });
  progress("starting the MongoDB-wire server and Kafka for the tests");
  const started = Date.now();
  const procs = [
    spawnLogged(mongoWireSpec(mongoWire, join(TEST_INFRA.dir, "mongo-wire"), TEST_INFRA.mongoPort, logs), {
      detached: true,
    }),
    spawnLogged(
      kafkaSpec(
        kafkaLibs,
        join(TEST_INFRA.dir, "kafka"),
        TEST_INFRA.kafkaPort,
        TEST_INFRA.kafkaControllerPort,
        logs,
        testKafkaUsers(),
        KAFKA_ADMIN_USER,
      ),
      { detached: true },
    ),
  ];
  for (const p of procs) p.unref();
  writeFileSync(pidFile, JSON.stringify(procs.map((p) => p.pid)));
  await waitFor("the MongoDB-wire server", () => portOpen(TEST_INFRA.mongoPort), 30_000);
  await waitFor("Kafka", () => portOpen(TEST_INFRA.kafkaPort), 90_000);
  progress(`ready in ${((Date.now() - started) / 1000).toFixed(1)} s (logs: ${logs})`);
  return true;
}

export function stopTestInfra(): void {
  if (!existsSync(pidFile)) return;
  for (const pid of JSON.parse(readFileSync(pidFile, "utf8")) as number[]) {
    try {
      process.kill(-pid, "SIGTERM");
    } catch {
      // already gone
    }
  }
  rmSync(pidFile, { force: true });
}
