import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createHash, randomBytes, randomInt } from "node:crypto";
import { existsSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "./paths.js";

// Provisioning and launch of the local infrastructure, from registries only: the MongoDB-wire
// server (mongo-java-server with its H2 backend, fetched with Maven from deploy/infra/mongo-wire/pom.xml
// and started by our Main.java there) and Apache Kafka 3.9.1 (Maven, deploy/infra/kafka/pom.xml).

export const MONGO_WIRE_VERSION = "1.47.0";
const ECJ_VERSION = "3.33.0";
export const KAFKA_VERSION = "3.9.1";

type Progress = (line: string) => void;

function run(cmd: string, args: string[], cwd: string, what: string): void {
  const result = spawnSync(cmd, args, { cwd, stdio: ["ignore", "inherit", "inherit"], env: process.env });
  if (result.error) throw new Error(`${what}: cannot run ${cmd}: ${result.error.message}`);
  if (result.status !== 0) throw new Error(`${what}: ${cmd} exited with ${result.status}`);
}

/** Fetches a pom's runtime dependencies into `libs` once. */
function fetchJars(pom: string, libs: string, what: string): void {
  const tmp = `${libs}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  run(
    "mvn",
    ["-q", "-B", "-f", pom, "dependency:copy-dependencies", `-DoutputDirectory=${tmp}`, "-DincludeScope=runtime"],
    repoRoot,
    what,
  );
  rmSync(libs, { recursive: true, force: true });
  renameSync(tmp, libs);
}

export interface MongoWireInstall {
  libs: string;
  classes: string;
}

/** The Eclipse Java compiler, for machines with a Java runtime but no javac. */
function ensureEcj(home: string): string {
  const jar = join(home, "ecj", `ecj-${ECJ_VERSION}.jar`);
  if (!existsSync(jar)) {
    run(
      "mvn",
      [
        "-q",
        "-B",
        "dependency:copy",
        `-Dartifact=org.eclipse.jdt:ecj:${ECJ_VERSION}`,
        `-DoutputDirectory=${join(home, "ecj")}`,
      ],
      repoRoot,
      "fetching the Eclipse Java compiler",
    );
  }
  return jar;
}

/**
 * mongo-java-server's jars and our compiled Main, fetched and built once into the cache; Main again
 * whenever its source changes (its classes are kept under a hash of it).
 */
export function ensureMongoWire(cache: string, progress: Progress): MongoWireInstall {
  const home = join(cache, `mongo-wire-${MONGO_WIRE_VERSION}`);
  const source = join(repoRoot, "deploy", "infra", "mongo-wire");
  const mainHash = createHash("sha256")
    .update(readFileSync(join(source, "Main.java")))
    .digest("hex")
    .slice(0, 12);
  const install = { libs: join(home, "libs"), classes: join(home, `classes-${mainHash}`) };
  if (existsSync(join(install.classes, "Main.class")) && existsSync(install.libs)) return install;
  mkdirSync(home, { recursive: true });
  if (!existsSync(install.libs)) {
    progress(`fetching mongo-java-server ${MONGO_WIRE_VERSION} with Maven (first run only)`);
    fetchJars(join(source, "pom.xml"), install.libs, "fetching mongo-java-server");
  }
  const tmp = `${install.classes}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  const classpath = readdirSync(install.libs)
    .map((jar) => join(install.libs, jar))
    .join(":");
  const sources = ["-d", tmp, "-cp", classpath, join(source, "Main.java")];
  // javac where a JDK is installed; with a JRE alone, the Eclipse compiler (a plain jar from Maven).
  if (spawnSync("javac", ["-version"], { stdio: "ignore" }).status === 0)
    run("javac", sources, source, "compiling the MongoDB-wire server");
  else
    run("java", ["-jar", ensureEcj(home), "-17", "-nowarn", ...sources], source, "compiling the MongoDB-wire server");
  rmSync(install.classes, { recursive: true, force: true });
  renameSync(tmp, install.classes);
  progress("mongo-java-server ready");
  return install;
}

/** The directory of Kafka's jars, fetched once into the cache. */
export function ensureKafka(cache: string, progress: Progress): string {
  const libs = join(cache, `kafka-${KAFKA_VERSION}`, "libs");
  if (existsSync(join(libs, `kafka_2.13-${KAFKA_VERSION}.jar`))) return libs;
  progress(`fetching Apache Kafka ${KAFKA_VERSION} with Maven (first run only)`);
  fetchJars(join(repoRoot, "deploy", "infra", "kafka", "pom.xml"), libs, "fetching Kafka");
  progress("Kafka fetched");
  return libs;
}

export interface InfraProcessSpec {
  name: string;
  command: string;
  args: string[];
  logFile: string;
  env?: NodeJS.ProcessEnv;
}

/**
 * The MongoDB-wire server with its data in one H2 file under `dataDir`, kept across starts. C1 only
 * (TieredStopAtLevel=1), as for Kafka: C2 kept recompiling the store path, and storing 1 MiB
 * segments cost the server 22-47 ms of CPU per MiB with it against 12-22 without (docs/performance.md).
 */
export function mongoWireSpec(
  install: MongoWireInstall,
  dataDir: string,
  port: number,
  logDir: string,
): InfraProcessSpec {
  mkdirSync(dataDir, { recursive: true });
  return {
    name: "mongo-wire",
    command: "java",
    args: [
      "-Xms64m",
      "-Xmx1g",
      "-XX:TieredStopAtLevel=1",
      "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
      "-cp",
      `${install.classes}:${install.libs}/*`,
      "Main",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--data",
      join(dataDir, "mongo.mv"),
    ],
    logFile: join(logDir, "mongo-wire.log"),
  };
}

/** Kafka users and their passwords: the broker's super user (KAFKA_ADMIN_USER) and every workload's. */
export type KafkaUserPasswords = Record<string, string>;

/**
 * Writes the KRaft config and formats the storage on first use; later starts keep the data.
 *
 * Authenticated as in the chart (docs/security.md, "Kafka"): clients on a SASL_PLAINTEXT listener
 * with SCRAM-SHA-256, the controller's own listener with PLAIN for the super user alone, and the
 * StandardAuthorizer admitting each user only to what its ACLs grant (kafka-access.ts). Users are
 * created when the storage is formatted; a storage formatted for other users (a state directory
 * from an older version) is formatted again, losing only Kafka's copy of events.
 */
export function kafkaSpec(
  libs: string,
  dataDir: string,
  port: number,
  controllerPort: number,
  logDir: string,
  users: KafkaUserPasswords,
  adminUser: string,
): InfraProcessSpec {
  const logDirs = join(dataDir, "data");
  const usersMarker = join(dataDir, "users-formatted");
  const formattedUsers = `${Object.keys(users).sort().join(",")}\n`;
  const formattedWith = existsSync(usersMarker) ? readFileSync(usersMarker, "utf8") : undefined;
  if (existsSync(join(logDirs, "meta.properties")) && formattedWith !== formattedUsers)
    rmSync(logDirs, { recursive: true, force: true });
  mkdirSync(logDirs, { recursive: true });
  const adminPassword = users[adminUser];
  if (!adminPassword) throw new Error(`Kafka: no password for the super user ${adminUser}`);
  const jaas = (module: string, extra = "") =>
    `org.apache.kafka.common.security.${module} required username="${adminUser}" password="${adminPassword}"${extra};`;
  const config = join(dataDir, "server.properties");
  writeFileSync(
    config,
    [
      "process.roles=broker,controller",
      "node.id=1",
      `controller.quorum.voters=1@127.0.0.1:${controllerPort}`,
      `listeners=CLIENT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controllerPort}`,
      `advertised.listeners=CLIENT://127.0.0.1:${port}`,
      "controller.listener.names=CONTROLLER",
      "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,CLIENT:SASL_PLAINTEXT",
      "inter.broker.listener.name=CLIENT",
      "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
      "sasl.mechanism.controller.protocol=PLAIN",
      "listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-256",
      `listener.name.client.scram-sha-256.sasl.jaas.config=${jaas("scram.ScramLoginModule")}`,
      "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
      `listener.name.controller.plain.sasl.jaas.config=${jaas("plain.PlainLoginModule", ` user_${adminUser}="${adminPassword}"`)}`,
      "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
      `super.users=User:${adminUser}`,
      "allow.everyone.if.no.acl.found=false",
      `log.dirs=${logDirs}`,
      "num.partitions=3",
      "offsets.topic.replication.factor=1",
      "offsets.topic.num.partitions=3",
      "transaction.state.log.replication.factor=1",
      "transaction.state.log.min.isr=1",
      "group.initial.rebalance.delay.ms=0",
      "auto.create.topics.enable=false",
      // Quiet when idle (issue 14's idle budget): the controller's no-op metadata records every 5 s
      // instead of every 500 ms, and fewer threads polling for work that one broker does not have.
      "metadata.max.idle.interval.ms=5000",
      "num.network.threads=2",
      "num.io.threads=2",
      "background.threads=2",
      "num.recovery.threads.per.data.dir=1",
      "log.cleaner.threads=1",
      "",
    ].join("\n"),
    { mode: 0o600 },
  );
  const log4j = join(dataDir, "log4j.properties");
  writeFileSync(
    log4j,
    [
      "log4j.rootLogger=WARN, stdout",
      "log4j.appender.stdout=org.apache.log4j.ConsoleAppender",
      "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout",
      "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n",
      "log4j.logger.kafka=WARN",
      "log4j.logger.org.apache.kafka=WARN",
      "",
    ].join("\n"),
  );
  // C1-compiled code only (TieredStopAtLevel=1): the local broker carries a few small messages per
  // request, and the C2 compiler's bursts kept costing 0.03-0.05 core for minutes after a start,
  // while the stack was otherwise idle (issue 14's idle budget).
  const jvm = [
    "-Xms256m",
    "-Xmx768m",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-XX:TieredStopAtLevel=1",
    `-Dlog4j.configuration=file:${log4j}`,
    "-cp",
    `${libs}/*`,
  ];
  if (!existsSync(join(logDirs, "meta.properties"))) {
    // As --cluster-id=ID: an id that begins with "-" would otherwise read as an option.
    const clusterId = randomBytes(16).toString("base64url");
    const scram = Object.entries(users).flatMap(([name, password]) => [
      "--add-scram",
      `SCRAM-SHA-256=[name=${name},password=${password}]`,
    ]);
    run(
      "java",
      [...jvm, "kafka.tools.StorageTool", "format", `--cluster-id=${clusterId}`, "-c", config, ...scram],
      dataDir,
      "formatting Kafka storage",
    );
    writeFileSync(usersMarker, formattedUsers);
  }
  return { name: "kafka", command: "java", args: [...jvm, "kafka.Kafka", config], logFile: join(logDir, "kafka.log") };
}

/**
 * The passwords of the Kafka users, generated once and kept in `file` (0600) like the other local
 * secrets; a user missing from the file is added (and Kafka's storage, formatted without it, is
 * formatted again: kafkaSpec compares the marker).
 */
export function localKafkaUsers(file: string, names: readonly string[]): KafkaUserPasswords {
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as KafkaUserPasswords) : {};
  const missing = names.filter((name) => typeof kept[name] !== "string");
  for (const name of missing) kept[name] = randomBytes(24).toString("base64url");
  if (missing.length > 0) writeFileSync(file, `${JSON.stringify(kept, null, 2)}\n`, { mode: 0o600 });
  return Object.fromEntries(names.map((name) => [name, kept[name]!]));
}

export function spawnLogged(spec: InfraProcessSpec, opts: { detached?: boolean } = {}): ChildProcess {
  const fd = openSync(spec.logFile, "a");
  return spawn(spec.command, spec.args, {
    stdio: ["ignore", fd, fd],
    env: { ...process.env, ...spec.env },
    detached: opts.detached ?? false,
  });
}

export function portOpen(port: number, host = "127.0.0.1"): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

export async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what} did not become ready within ${Math.round(timeoutMs / 1000)} s`);
}

export function listFiles(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir) : [];
}

/**
 * The ports the kernel hands out on its own, to `listen(0)` and to every outgoing connection
 * (Linux: /proc/sys/net/ipv4/ip_local_port_range; elsewhere the IANA range).
 */
export function ephemeralPortRange(
  read: () => string = () => readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8"),
): [number, number] {
  try {
    const [low, high] = read().trim().split(/\s+/).map(Number);
    if (Number.isInteger(low) && Number.isInteger(high) && low! > 1024 && high! >= low!) return [low!, high!];
  } catch {
    // not Linux
  }
  return [49152, 65535];
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** Where freePort records the ports it handed out: a file per port, holding the pid that asked. */
export const PORT_CLAIMS_DIR = join(tmpdir(), "pi-port-claims");

/**
 * Whether `pid` is a live process. A zombie (exited, not yet reaped) still answers signal 0; where
 * there is a /proc (Linux), its state tells it apart. Elsewhere (macOS) signal 0 alone decides.
 */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return !existsSync("/proc/self/stat");
  }
}

/**
 * Claims `port` for this process until it exits: false when a live process, this one included,
 * claimed it first. A port is picked long before its process listens on it (a stack picks all of
 * its ports, then starts its processes), and nothing else marks it taken meanwhile: two stacks
 * started side by side, or two picks of one stack, could draw the same one, and the replica that
 * binds second failed to start again and again (seen: an auth replica of `npm start` in a crash loop
 * on EADDRINUSE while another test's stack held its port).
 */
export function claimPort(port: number, dir = PORT_CLAIMS_DIR): boolean {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: "wx" });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    let owner = 0;
    try {
      owner = Number(readFileSync(file, "utf8"));
    } catch {
      // removed meanwhile: try again
    }
    if (owner > 0 && processAlive(owner)) return false;
    // The process that claimed it has exited.
    rmSync(file, { force: true });
  }
  return false;
}

/** Gives back a port this process claimed (a replica that moves to a new port at its restart). */
export function releasePort(port: number, dir = PORT_CLAIMS_DIR): void {
  const file = join(dir, String(port));
  try {
    if (Number(readFileSync(file, "utf8")) === process.pid) rmSync(file, { force: true });
  } catch {
    // not claimed
  }
}

/**
 * A TCP port free on 127.0.0.1 right now and claimed for this process (claimPort), for a process
 * that will listen on it later (and again after each restart). It is taken below the kernel's
 * ephemeral range: a port the kernel chose could meanwhile become the local end of some outgoing
 * connection, or be handed to any other process's listen(0), and the replica meant to listen there
 * would fail to bind, or its clients would reach a stranger (seen: a killed auth replica's port
 * served by another stack's service).
 */
export async function freePort(claims = PORT_CLAIMS_DIR): Promise<number> {
  const [ephemeralLow] = ephemeralPortRange();
  const low = Math.max(1025, ephemeralLow - 20_000);
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = low + randomInt(ephemeralLow - low);
    if ((await bindable(port)) && claimPort(port, claims)) return port;
  }
  throw new Error(`no free port between ${low} and ${ephemeralLow - 1}`);
}
