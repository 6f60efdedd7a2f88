import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ADMIN_SERVICES, WORKLOADS } from "@pi/common/rpc/allowed-callers";
import { createKafka, ensureTopics, kafkaCredentials, scramUser, type KafkaCredentials } from "@pi/common/events/kafka";
import { generateIdentity, publicKeyEntry } from "@pi/common/rpc/service-identity";
import { grantKafkaAccess, KAFKA_ADMIN_USER, KAFKA_USERS } from "@pi/common/events/kafka-access";
import type { Settings } from "@pi/common/runtime/settings";
import { LOCAL_IDENTITY_FILE, LOCAL_STACK_FILE } from "./state-files.js";
import { newDataKeysEntry } from "@pi/common/store/data-keys";
import type { Logger } from "@pi/common/runtime/logger";
import {
  ensureKafka,
  ensureMongoWire,
  freePort,
  localKafkaUsers,
  mongoWireSpec,
  kafkaSpec,
  portOpen,
  releasePort,
  waitFor,
  type KafkaUserPasswords,
} from "./infra.js";
import { heapFlagsOfDockerfile } from "./heap-flags.js";
import { cacheDir, repoRoot } from "./paths.js";
import { PROMETHEUS_TARGETS_FILE, PrometheusTargets } from "./prometheus-targets.js";
import { Supervisor } from "./supervisor.js";

export const SERVICES = ["auth", "connection", "file-intake", "extraction", "webhook", "gateway"] as const;

/** V8 heap floors for every service process: the image's (deploy/Dockerfile's NODE_HEAP_FLAGS, their one source). */
export const NODE_HEAP_FLAGS = heapFlagsOfDockerfile();

/** The services that others call: each replica on ports of its own, every caller given all of them. */
export const INTERNAL_SERVICES = ["auth", "connection", "file-intake", "webhook"] as const;
/** Services nobody calls (they consume events): each replica serves only its health checks, on a port of its own. */
export const WORKER_SERVICES = ["extraction"] as const;
type InternalService = (typeof INTERNAL_SERVICES)[number] | (typeof WORKER_SERVICES)[number];

type Plane = "SERVICE" | "ADMIN";
/** AUTH_SERVICE_PORT, FILE_INTAKE_SERVICE_URL, AUTH_ADMIN_PORT, ... */
const settingName = (service: InternalService, what: "PORT" | "URL", plane: Plane = "SERVICE") =>
  `${service.toUpperCase().replace(/-/g, "_")}_${plane}_${what}`;
/** The data plane's port, and the admin plane's for a service with admin RPCs. */
const planesOf = (service: InternalService): Plane[] =>
  (ADMIN_SERVICES as readonly string[]).includes(service) ? ["SERVICE", "ADMIN"] : ["SERVICE"];

export interface StackOptions {
  settings: Settings;
  stateDir: string;
  logger: Logger;
  /** Ports of the local infrastructure (free ones when undefined); ignored when external MONGODB_URI / KAFKA_BROKERS are given. */
  mongoPort?: number;
  kafkaPort?: number;
  kafkaControllerPort?: number;
  /** Processes per service (gateway included); each replica is supervised on its own. */
  replicas: Record<(typeof SERVICES)[number], number>;
  /** The environment the stack was started with: `*_SERVICE_PORT` / `*_SERVICE_URL` (`*_ADMIN_PORT` / `*_ADMIN_URL`) set there win over free ports. */
  env: NodeJS.ProcessEnv;
  /** Start the MongoDB-wire server and Kafka here (false: use MONGODB_URI and KAFKA_BROKERS as they are). */
  startInfra: boolean;
  progress: (line: string) => void;
}

/**
 * Secrets the local stack generates once and keeps under the state directory: the pepper of client
 * secret hashes, and the KEK of the data at rest (DATA_KEYS, one key "k1"). A state directory from
 * before DATA_KEYS gets the key added, its pepper kept. Losing this file loses every stored secret
 * and file: it lives and goes with the databases beside it.
 */
export function localSecrets(stateDir: string): { CREDENTIAL_PEPPER: string; DATA_KEYS: string } {
  const file = join(stateDir, "secrets.json");
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as Partial<Record<string, string>>) : {};
  const secrets = {
    CREDENTIAL_PEPPER: kept.CREDENTIAL_PEPPER ?? randomBytes(32).toString("base64url"),
    DATA_KEYS: kept.DATA_KEYS ?? newDataKeysEntry("k1"),
  };
  if (kept.CREDENTIAL_PEPPER !== secrets.CREDENTIAL_PEPPER || kept.DATA_KEYS !== secrets.DATA_KEYS) {
    writeFileSync(file, JSON.stringify({ ...kept, ...secrets }), { mode: 0o600 });
  }
  return secrets;
}

/**
 * Each workload's service identity (its SERVICE_IDENTITY_KEY), generated once and kept under the
 * state directory like the pepper, so that the operator CLI (which takes the `ops` key from the
 * same file) and later starts use the same keys. A workload missing from the file is added.
 */
export function localIdentities(stateDir: string): Record<(typeof WORKLOADS)[number], string> {
  const file = join(stateDir, LOCAL_IDENTITY_FILE);
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as Record<string, string>) : {};
  const missing = WORKLOADS.filter((name) => typeof kept[name] !== "string");
  for (const name of missing) kept[name] = generateIdentity(name).key;
  if (missing.length > 0) writeFileSync(file, `${JSON.stringify(kept, null, 2)}\n`, { mode: 0o600 });
  return Object.fromEntries(WORKLOADS.map((name) => [name, kept[name]!])) as Record<(typeof WORKLOADS)[number], string>;
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
  // Every process gets its own private key and everyone's public keys, as in the chart.
  const identities = localIdentities(stateDir);
  const env: NodeJS.ProcessEnv = {
    ...localSecrets(stateDir),
    SERVICE_IDENTITY_PUBLIC_KEYS: Object.values(identities).map(publicKeyEntry).join(","),
    WEBHOOK_ALLOW_INSECURE_URLS: process.env.WEBHOOK_ALLOW_INSECURE_URLS ?? "true",
    KAFKAJS_NO_PARTITIONER_WARNING: "1",
  };

  // Kafka users when the stack runs its own Kafka: each service its own, the stack itself the super
  // user (topics and ACLs). With an external Kafka, every process uses KAFKA_USERNAME as given.
  let kafkaUsers: KafkaUserPasswords | undefined;
  if (opts.startInfra) {
    const cache = cacheDir();
    const mongoWire = ensureMongoWire(cache, progress);
    const kafkaLibs = ensureKafka(cache, progress);
    // Ports nobody chose are free ones, so that two stacks run side by side.
    const mongoPort = opts.mongoPort ?? (await freePort());
    const kafkaPort = opts.kafkaPort ?? (await freePort());
    const kafkaControllerPort = opts.kafkaControllerPort ?? (await freePort());
    if (await portOpen(mongoPort))
      throw new Error(`port ${mongoPort} (MongoDB) is already in use; stop what holds it or set MONGODB_PORT`);
    if (await portOpen(kafkaPort))
      throw new Error(`port ${kafkaPort} (Kafka) is already in use; stop what holds it or set KAFKA_PORT`);
    progress("starting the MongoDB-wire server and Kafka");
    await supervisor.start(mongoWireSpec(mongoWire, join(stateDir, "mongo-wire"), mongoPort, logDir));
    kafkaUsers = localKafkaUsers(join(stateDir, "kafka-users.json"), [KAFKA_ADMIN_USER, ...KAFKA_USERS]);
    await supervisor.start(
      kafkaSpec(
        kafkaLibs,
        join(stateDir, "kafka"),
        kafkaPort,
        kafkaControllerPort,
        logDir,
        kafkaUsers,
        KAFKA_ADMIN_USER,
      ),
    );
    env.MONGODB_URI = `mongodb://127.0.0.1:${mongoPort}/`;
    env.KAFKA_BROKERS = `127.0.0.1:${kafkaPort}`;
    await waitFor("the MongoDB-wire server", () => portOpen(mongoPort), 30_000);
    await waitFor("Kafka", () => portOpen(kafkaPort), 180_000);
  }
  const brokers = env.KAFKA_BROKERS ?? opts.settings.KAFKA_BROKERS;
  const asUser = (name: string): KafkaCredentials | undefined =>
    kafkaUsers ? scramUser(name, kafkaUsers[name]!) : kafkaCredentials(opts.settings);
  progress("creating Kafka topics");
  const stackKafka = createKafka(brokers, "local-stack", logger, asUser(KAFKA_ADMIN_USER));
  await ensureTopics(stackKafka, opts.settings.DATA_NAMESPACE, undefined, { configureExisting: true });
  if (kafkaUsers) await grantKafkaAccess(stackKafka, opts.settings.DATA_NAMESPACE);
  const kafkaEnv = (service: string): NodeJS.ProcessEnv =>
    kafkaUsers ? { KAFKA_USERNAME: service, KAFKA_PASSWORD: kafkaUsers[service] } : {};

  // Every replica of an internal service listens on ports of its own (the ones set for the service,
  // then free ones), one per plane, and every client gets the whole list in the service's
  // *_SERVICE_URL (*_ADMIN_URL for the admin plane).
  const ports = new Map<string, number>();
  const urlSettings: string[] = [];
  for (const service of INTERNAL_SERVICES) {
    for (const plane of planesOf(service)) {
      const set = opts.env[settingName(service, "PORT", plane)];
      for (let i = 1; i <= opts.replicas[service]; i++)
        ports.set(`${service}-${i}:${plane}`, i === 1 && set ? Number(set) : await freePort());
      const urls = Array.from(
        { length: opts.replicas[service] },
        (_, i) => `http://127.0.0.1:${ports.get(`${service}-${i + 1}:${plane}`)}`,
      );
      const name = settingName(service, "URL", plane);
      env[name] = opts.env[name] || urls.join(",");
      urlSettings.push(name);
    }
  }
  for (const service of WORKER_SERVICES) {
    for (let i = 1; i <= opts.replicas[service]; i++) ports.set(`${service}-${i}:SERVICE`, await freePort());
  }
  writeFileSync(
    join(stateDir, LOCAL_STACK_FILE),
    `${JSON.stringify(Object.fromEntries(urlSettings.map((name) => [name, env[name]])), null, 2)}\n`,
  );

  const replicaNames = (service: (typeof SERVICES)[number]) =>
    Array.from({ length: opts.replicas[service] }, (_, i) => `${service}-${i + 1}`);
  // Every process serves its metrics on a free port of its own, taken anew at each (re)start and
  // written to the scrape targets of a local Prometheus (docs/observability.md).
  const targets = new PrometheusTargets(join(stateDir, PROMETHEUS_TARGETS_FILE));
  progress(`starting services: ${SERVICES.map((s) => `${s} ×${opts.replicas[s]}`).join(", ")}`);
  for (const service of SERVICES) {
    for (const [index, name] of replicaNames(service).entries()) {
      let metricsPort: number | undefined;
      const own =
        service === "gateway"
          ? {}
          : Object.fromEntries(
              planesOf(service).map((plane) => [
                settingName(service, "PORT", plane),
                String(ports.get(`${name}:${plane}`)),
              ]),
            );
      await supervisor.start({
        name,
        command: process.execPath,
        args: [...NODE_HEAP_FLAGS, "--enable-source-maps", join(repoRoot, "services", service, "dist", "main.js")],
        env: { ...env, ...kafkaEnv(service), SERVICE_IDENTITY_KEY: identities[service], ...own },
        logFile: join(logDir, `${name}.log`),
        // Gateway replicas share the partner port as node:cluster workers of the supervisor.
        sharesPorts: service === "gateway",
        beforeStart: async () => {
          // A new port at each start; the last one's claim is given back, so restarts never use up the range.
          if (metricsPort !== undefined) releasePort(metricsPort);
          const port = await freePort();
          metricsPort = port;
          targets.set(name, { service, replica: index + 1, port });
          return { METRICS_PORT: String(port) };
        },
      });
    }
  }
  return {
    supervisor,
    env,
    // Gateways first (they stop taking requests), then the services, then the infrastructure.
    stop: async () => {
      await supervisor.stop([
        replicaNames("gateway"),
        [...WORKER_SERVICES, ...INTERNAL_SERVICES].flatMap(replicaNames),
        ["kafka", "mongo-wire"],
      ]);
      targets.clear();
    },
  };
}
