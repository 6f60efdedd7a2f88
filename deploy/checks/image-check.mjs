// The image check: builds deploy/Dockerfile on a base image assembled on this machine (no image
// can be pulled here) and runs the gateway container until it answers 200 on /healthz.
//
//   node deploy/checks/image-check.mjs [--context DIR] [--no-cache]
//                                       exit 0 passed, 1 failed, 3 skipped (no engine)
//
// 1. A Docker engine: the running one, else `dockerd` started in the background (installed with
//    `apt-get install docker.io` first when missing; its log goes to .state/docker/dockerd.log).
//    Where no engine can start, the check says why and reports "skipped", never "passed".
// 2. The base image: `docker import` of a root filesystem holding this machine's own node binary
//    (at /usr/bin/node) with the shared libraries `ldd` lists for it, npm 10.8.2 (the one Node 20
//    and so node:20-bookworm-slim ship; fetched with `npm pack`), a POSIX shell and the few tools
//    the Dockerfile's RUN steps use (with their libraries), /etc/passwd with the `node` user
//    (uid 1000), and this machine's CA bundle. It stands in for node:20-bookworm-slim.
// 3. `docker build -f deploy/Dockerfile --build-arg BASE_IMAGE=<that tag> --build-arg SERVICE=gateway`
//    (npm ci inside needs the npm registry; when the container network cannot reach it, the build
//    uses --network host).
// 4. The image: runs as uid 1000, has no dev dependencies, holds the operator CLI; then the
//    gateway container, read-only root, all capabilities dropped, must run
//    `node services/gateway/dist/main.js` and answer 200 on GET /healthz. Under jest (TEST_MONGODB_URI
//    and TEST_KAFKA_BROKERS set by its globalSetup) an auth container from the same image runs
//    beside it against those, as the gateway needs auth and Kafka to start; alone otherwise.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import {
  accessSync,
  constants,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createHash, generateKeyPairSync, randomBytes } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { heapFlagsOfDockerfile } from "../local/dist/heap-flags.js";

export { heapFlagsOfDockerfile };

/** A workload's SERVICE_IDENTITY_KEY and public key entry, in the form of services/common/src/rpc/service-identity.ts. */
function serviceIdentity(name) {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return {
    key: `${name}:${privateKey.export({ type: "pkcs8", format: "der" }).toString("base64")}`,
    publicKey: `${name}:${publicKey.export({ type: "spki", format: "der" }).toString("base64")}`,
  };
}

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const stateDir = resolve(process.env.STATE_DIR || join(repoRoot, ".state"));
const workDir = join(stateDir, "image-check");
const dockerLogDir = join(stateDir, "docker");

const log = (line) => process.stderr.write(`[image-check] ${line}\n`);
const sleepSync = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** The V8 flags deploy/Dockerfile starts every service with (its ENV NODE_HEAP_FLAGS). */

function sh(cmd, args, opts = {}) {
  return spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...opts });
}

/** The executable file named cmd on PATH (not a shell builtin). */
function which(cmd) {
  for (const dir of (process.env.PATH || "").split(":")) {
    if (!dir) continue;
    const path = join(dir, cmd);
    try {
      accessSync(path, constants.X_OK);
      if (statSync(path).isFile()) return path;
    } catch {}
  }
  return undefined;
}

function engineAnswers() {
  return sh("docker", ["info", "--format", "{{.ServerVersion}}"], { timeout: 15_000 }).status === 0;
}

function tail(file, lines = 15) {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/**
 * Makes a Docker engine answer, synchronously (so that a test file can decide at load time
 * whether to run or skip). Returns { ok: true, startedPid? } or { ok: false, reason }.
 */
export function ensureDockerEngine() {
  if (which("docker") && engineAnswers()) return { ok: true };

  if (!which("dockerd")) {
    if (!which("apt-get"))
      return { ok: false, reason: "no Docker engine, no dockerd and no apt-get to install docker.io" };
    if (process.getuid?.() !== 0) return { ok: false, reason: "no Docker engine, and installing docker.io needs root" };
    log("installing docker.io with apt-get (first run on this machine only)");
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    let r = sh("apt-get", ["install", "-y", "-q", "docker.io"], { env, timeout: 600_000 });
    if (r.status !== 0) {
      sh("apt-get", ["update", "-q"], { env, timeout: 300_000 });
      r = sh("apt-get", ["install", "-y", "-q", "docker.io"], { env, timeout: 600_000 });
    }
    if (r.status !== 0 || !which("dockerd")) {
      return {
        ok: false,
        reason: `apt-get install docker.io failed: ${(r.stderr || r.stdout || "").trim().split("\n").slice(-3).join(" | ")}`,
      };
    }
  }
  if (!which("docker")) return { ok: false, reason: "dockerd is installed but the docker client is not" };

  mkdirSync(dockerLogDir, { recursive: true });
  const logFile = join(dockerLogDir, "dockerd.log");
  log(`starting dockerd in the background (log: ${logFile})`);
  const fd = openSync(logFile, "a");
  const child = spawn("dockerd", [], { detached: true, stdio: ["ignore", fd, fd] });
  let exited = null;
  child.on("exit", (code, signal) => (exited = code ?? signal));
  child.unref();
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (engineAnswers()) {
      log(`dockerd answers (pid ${child.pid})`);
      return { ok: true, startedPid: child.pid };
    }
    // `exited` is only set by the event loop, which this loop blocks: look at the process itself
    // (gone, or a zombie not reaped yet).
    if (child.pid === undefined || exited !== null || !processAlive(child.pid)) {
      return {
        ok: false,
        reason: `dockerd exited at start (no privileges for containers here?); last log lines:\n${tail(logFile)}`,
      };
    }
    sleepSync(500);
  }
  try {
    process.kill(child.pid, "SIGTERM");
  } catch {}
  return { ok: false, reason: `dockerd did not answer within 60 s; last log lines:\n${tail(logFile)}` };
}

function processAlive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX]/.test(stat);
  } catch {
    return false;
  }
}

/** Stops a dockerd that ensureDockerEngine started (and only that one). */
export function stopDockerEngine(engine) {
  if (!engine?.startedPid) return;
  try {
    process.kill(engine.startedPid, "SIGTERM");
  } catch {
    return;
  }
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline && processAlive(engine.startedPid)) sleepSync(250);
}

// ---------------------------------------------------------------------------------------------
// The base image.

/** Shared libraries of an ELF binary, as `ldd` lists them (absolute paths). */
function sharedLibs(binary) {
  const r = sh("ldd", [binary]);
  if (r.status !== 0) return [];
  return [...r.stdout.matchAll(/(\/[^\s]+) \(0x/g)].map((m) => m[1]);
}

function copyInto(root, file, { follow = true } = {}) {
  const target = join(root, file);
  mkdirSync(dirname(target), { recursive: true });
  if (existsSync(target)) return;
  copyFileSync(follow ? realpathSync(file) : file, target);
}

// The npm that node:20-bookworm-slim ships (Node 20 bundles npm 10.8.2), not this machine's own.
export const BASE_NPM_VERSION = process.env.IMAGE_CHECK_NPM_VERSION || "10.8.2";

/** The npm package's tarball, fetched once with `npm pack` into the infrastructure cache. */
function ensureNpmTarball() {
  const dir = join(resolve(process.env.INFRA_CACHE_DIR || join(repoRoot, ".state", "cache")), "image-check");
  const tarball = join(dir, `npm-${BASE_NPM_VERSION}.tgz`);
  if (existsSync(tarball)) return tarball;
  mkdirSync(dir, { recursive: true });
  log(`fetching npm ${BASE_NPM_VERSION} for the base image (npm pack, first run only)`);
  const r = sh("npm", ["pack", `npm@${BASE_NPM_VERSION}`, "--pack-destination", dir, "--silent"], { cwd: dir });
  if (r.status !== 0 || !existsSync(tarball)) throw new Error(`npm pack npm@${BASE_NPM_VERSION} failed: ${r.stderr}`);
  return tarball;
}

// Tools the Dockerfile's RUN steps and npm's lifecycle scripts use.
const TOOLS = ["sh", "env", "cp", "mkdir", "rm", "mv", "ln", "ls", "cat", "chmod", "id", "sleep", "true", "uname"];

// The rest of the C library, as a Debian slim image has it: what native modules (and Node's DNS
// fallbacks) load beyond what ldd lists for node itself. pdf.js loads @napi-rs/canvas, which needs
// librt: without it every PDF extraction in an image failed.
const GLIBC_FAMILY = [
  "librt.so.1",
  "libresolv.so.2",
  "libutil.so.1",
  "libanl.so.1",
  "libnss_files.so.2",
  "libnss_dns.so.2",
];

/** The .node files of the dependencies (prebuilt native modules), a few levels down node_modules. */
function nativeModules(dir = join(repoRoot, "node_modules"), depth = 0) {
  if (depth > 3 || !existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return nativeModules(path, depth + 1);
    return e.isFile() && e.name.endsWith(".node") ? [path] : [];
  });
}

/** A script for `node -e` in an image: loads every .node file under node_modules, prints those that fail. */
const LOAD_NATIVE_MODULES = `
const { readdirSync } = require("node:fs");
const { join } = require("node:path");
const find = (dir, depth) => depth > 3 ? [] : readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? find(join(dir, e.name), depth + 1) : e.name.endsWith(".node") ? [join(dir, e.name)] : []);
const failed = find("node_modules", 0).flatMap((f) => { try { require("./" + f); return []; } catch (e) { return [f + ": " + e.message]; } });
if (failed.length) { console.log(failed.join("; ")); process.exit(1); }
`;

/** Every shared library the base image carries: node's, the tools', the native modules', the C library's. */
function baseLibraries(binaries) {
  const libs = new Set();
  for (const [, source] of binaries) for (const lib of sharedLibs(source)) libs.add(lib);
  for (const mod of nativeModules()) for (const lib of sharedLibs(mod)) libs.add(lib);
  const libDir = [...libs].map((l) => dirname(l)).find((d) => existsSync(join(d, "libc.so.6")));
  for (const name of GLIBC_FAMILY) if (libDir && existsSync(join(libDir, name))) libs.add(join(libDir, name));
  return [...libs].sort();
}

/**
 * Tag of a base image built from this machine's node and the libraries it needs, imported once per
 * node version and set of libraries.
 */
export function ensureBaseImage({ rebuild = false } = {}) {
  const nodeBinary = realpathSync(which("node") ?? process.execPath);
  const version = sh(nodeBinary, ["--version"]).stdout.trim();
  const binaries = [["/usr/bin/node", nodeBinary]];
  for (const tool of TOOLS) {
    const path = which(tool);
    if (!path || path.startsWith("/work")) throw new Error(`host tool ${tool} not found`);
    binaries.push([tool === "sh" ? "/bin/sh" : join("/usr/bin", tool), realpathSync(path)]);
  }
  const libs = baseLibraries(binaries);
  const libsId = createHash("sha256").update(libs.join("\n")).digest("hex").slice(0, 8);
  const tag = `pi-image-check-base:node-${version.replace(/^v/, "")}-npm-${BASE_NPM_VERSION}-libs-${libsId}`;
  if (!rebuild && sh("docker", ["image", "inspect", tag]).status === 0) return tag;

  const npmTarball = ensureNpmTarball();
  log(`assembling base image ${tag} from ${nodeBinary} (ldd) and npm ${BASE_NPM_VERSION}`);
  const root = join(workDir, "rootfs");
  rmSync(root, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });

  for (const [target, source] of binaries) {
    mkdirSync(join(root, dirname(target)), { recursive: true });
    copyFileSync(source, join(root, target));
  }
  for (const lib of libs) copyInto(root, lib);
  // The libraries land where ldd found them (the loader at /lib64/ld-linux-x86-64.so.2, the rest
  // in /lib/x86_64-linux-gnu), which are the loader's built-in search paths: no ld.so.cache needed.
  mkdirSync(join(root, "usr/lib/node_modules/npm"), { recursive: true });
  execFileSync("tar", [
    "-xzf",
    npmTarball,
    "-C",
    join(root, "usr/lib/node_modules/npm"),
    "--strip-components=1",
    "--no-same-owner",
  ]);
  symlinkSync("../lib/node_modules/npm/bin/npm-cli.js", join(root, "usr/bin/npm"));
  symlinkSync("../lib/node_modules/npm/bin/npx-cli.js", join(root, "usr/bin/npx"));

  const etc = join(root, "etc");
  mkdirSync(etc, { recursive: true });
  writeFileSync(
    join(etc, "passwd"),
    "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
  );
  writeFileSync(join(etc, "group"), "root:x:0:\nnode:x:1000:\nnogroup:x:65534:\n");
  writeFileSync(join(etc, "nsswitch.conf"), "passwd: files\ngroup: files\nhosts: files dns\n");
  const caBundle = "/etc/ssl/certs/ca-certificates.crt";
  const haveCa = existsSync(caBundle);
  if (haveCa) copyInto(root, caBundle);
  for (const dir of ["tmp", "root", "home/node"]) mkdirSync(join(root, dir), { recursive: true, mode: 0o1777 });
  execFileSync("chmod", ["1777", join(root, "tmp")]);
  execFileSync("chown", ["1000:1000", join(root, "home/node")]);

  const changes = [
    "ENV PATH=/usr/local/bin:/usr/bin:/bin",
    ...(haveCa ? [`ENV NODE_EXTRA_CA_CERTS=${caBundle}`, `ENV SSL_CERT_FILE=${caBundle}`] : []),
    'CMD ["node"]',
  ];
  const tarball = join(workDir, "base-rootfs.tar");
  execFileSync("tar", ["-C", root, "--numeric-owner", "-cf", tarball, "."]);
  const imp = sh("docker", ["import", ...changes.flatMap((c) => ["--change", c]), tarball, tag]);
  rmSync(tarball, { force: true });
  if (imp.status !== 0) throw new Error(`docker import failed: ${imp.stderr}`);
  rmSync(root, { recursive: true, force: true });
  const check = sh("docker", ["run", "--rm", tag, "node", "-e", "console.log(process.version)"]);
  if (check.status !== 0 || check.stdout.trim() !== version)
    throw new Error(`the base image does not run node: ${check.stderr}`);
  log(`base image ${tag} ready (node ${version})`);
  return tag;
}

// ---------------------------------------------------------------------------------------------
// Build and run.

function runStreaming(cmd, args, { logFile, env } = {}) {
  return new Promise((resolvePromise) => {
    const fd = logFile ? openSync(logFile, "a") : "inherit";
    const child = spawn(cmd, args, { cwd: repoRoot, env: env ?? process.env, stdio: ["ignore", fd, fd] });
    child.on("exit", (code) => resolvePromise(code ?? 1));
  });
}

/** Whether a container on the default bridge network reaches the npm registry (npm ping). */
function bridgeReachesRegistry(baseTag) {
  const r = sh("docker", ["run", "--rm", baseTag, "npm", "ping", "--fetch-timeout=10000", "--fetch-retries=0"], {
    timeout: 60_000,
  });
  return r.status === 0;
}

/** The MongoDB-compatible server and Kafka of the test suite, when jest's globalSetup started them. */
function testInfraFromEnv(env = process.env) {
  return env.TEST_MONGODB_URI && env.TEST_KAFKA_BROKERS
    ? {
        mongoUri: env.TEST_MONGODB_URI,
        kafkaBrokers: env.TEST_KAFKA_BROKERS,
        kafkaUsers: JSON.parse(env.TEST_KAFKA_USERS ?? "{}"),
      }
    : undefined;
}

function freePort() {
  return new Promise((resolvePromise, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePromise(port));
    });
  });
}

function httpBody(url) {
  return new Promise((resolvePromise) => {
    const req = http.get(url, { timeout: 3000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolvePromise({ status: res.statusCode, body }));
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolvePromise(undefined));
  });
}

function authFailing(readyz) {
  if (!readyz) return true;
  try {
    return (JSON.parse(readyz.body).failing ?? []).includes("auth");
  } catch {
    return true;
  }
}

function httpStatus(url) {
  return new Promise((resolvePromise) => {
    const req = http.get(url, { timeout: 2000 }, (res) => {
      res.resume();
      res.on("end", () => resolvePromise(res.statusCode));
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolvePromise(undefined));
  });
}

/**
 * Runs the whole check. Returns { status: "passed" | "failed" | "skipped", reason?, timings, ... }.
 * contextDir: the build context (default the repository root).
 */
export async function runImageCheck({
  contextDir = repoRoot,
  service = "gateway",
  engine,
  noCache = false,
  infra = testInfraFromEnv(),
} = {}) {
  const timings = {};
  const t0 = Date.now();
  const lap = (name, since) => (timings[name] = Math.round((Date.now() - since) / 100) / 10);
  mkdirSync(workDir, { recursive: true });

  let start = Date.now();
  const eng = engine ?? ensureDockerEngine();
  lap("engineSeconds", start);
  if (!eng.ok) return { status: "skipped", reason: eng.reason, timings };

  const buildLog = join(workDir, "build.log");
  const containerName = `pi-image-check-${process.pid}`;
  const image = `pi-image-check/${service}:local`;
  try {
    start = Date.now();
    const base = ensureBaseImage();
    lap("baseImageSeconds", start);

    start = Date.now();
    const network = bridgeReachesRegistry(base) ? [] : ["--network", "host"];
    if (network.length)
      log("containers on the bridge network cannot reach the npm registry; building with --network host");
    writeFileSync(buildLog, "");
    log(`building ${image} from deploy/Dockerfile (log: ${buildLog})`);
    const env = { ...process.env };
    if (sh("docker", ["buildx", "version"]).status !== 0) env.DOCKER_BUILDKIT = "0";
    const code = await runStreaming(
      "docker",
      [
        "build",
        "--force-rm",
        ...network,
        ...(noCache ? ["--no-cache"] : []),
        "-f",
        join(repoRoot, "deploy", "Dockerfile"),
        "--build-arg",
        `BASE_IMAGE=${base}`,
        "--build-arg",
        `SERVICE=${service}`,
        "-t",
        image,
        contextDir,
      ],
      { logFile: buildLog, env },
    );
    lap("buildSeconds", start);
    if (code !== 0)
      return {
        status: "failed",
        reason: `docker build exited with ${code}; last lines:\n${tail(buildLog, 25)}`,
        timings,
      };

    // The image itself: non-root, no dev dependencies, the entry chosen by SERVICE.
    const inspect = JSON.parse(sh("docker", ["image", "inspect", image]).stdout)[0].Config;
    const problems = [];
    if (inspect.User !== "1000:1000")
      problems.push(`image user is ${JSON.stringify(inspect.User)}, expected 1000:1000`);
    if (!inspect.Env.includes(`SERVICE=${service}`)) problems.push(`image env lacks SERVICE=${service}`);
    const devDeps = sh("docker", [
      "run",
      "--rm",
      image,
      "sh",
      "-c",
      "ls -d node_modules/typescript node_modules/jest node_modules/@swc/core 2>/dev/null; true",
    ]);
    if (devDeps.stdout.trim())
      problems.push(`dev dependencies in the image: ${devDeps.stdout.trim().split("\n").join(", ")}`);
    const ops = sh("docker", ["run", "--rm", image, "sh", "-c", "ls services/ops/dist/main.js"]);
    if (ops.status !== 0) problems.push("the operator CLI (services/ops/dist/main.js) is not in the image");
    // Every prebuilt native module of the dependencies loads: a missing shared library fails only
    // when the module is first used (pdf.js's canvas: every PDF extraction failed).
    const natives = sh("docker", ["run", "--rm", image, "node", "-e", LOAD_NATIVE_MODULES]);
    if (natives.status !== 0)
      problems.push(`native modules that do not load in the image: ${natives.stdout.trim() || natives.stderr.trim()}`);
    if (problems.length) return { status: "failed", reason: problems.join("; "), timings };

    // The gateway container, hardened as in the chart (read-only root, a tmpfs /tmp, no
    // capabilities). With a MongoDB-compatible server and Kafka at hand (jest's globalSetup starts
    // them and exports TEST_MONGODB_URI and TEST_KAFKA_BROKERS), an auth container from the same
    // image (SERVICE=auth at run time) runs beside it on the host network, as the gateway needs auth
    // and Kafka to start; otherwise the gateway runs alone, and must still answer /healthz.
    start = Date.now();
    const hardened = ["--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"];
    let runEnv;
    let gatewayPort;
    let network0;
    let gatewayIdentity = serviceIdentity("gateway").key;
    let gatewayKafka = [];
    if (infra) {
      const authPort = await freePort();
      gatewayPort = await freePort();
      network0 = ["--network", "host"];
      runEnv = [
        `DATA_NAMESPACE=imagecheck${process.pid}`,
        `MONGODB_URI=${infra.mongoUri}`,
        `KAFKA_BROKERS=${infra.kafkaBrokers}`,
        `AUTH_SERVICE_PORT=${authPort}`,
        `AUTH_SERVICE_URL=http://127.0.0.1:${authPort}`,
        `AUTH_ADMIN_PORT=${await freePort()}`,
        `GATEWAY_PORT=${gatewayPort}`,
        "WEBHOOK_ALLOW_INSECURE_URLS=false",
        "LOG_LEVEL=info",
        // Both containers share the host's network: each its own free metrics port.
        "METRICS_PORT=0",
      ];
      const pepper = randomBytes(36).toString("base64url");
      const dataKeys = `k1:${randomBytes(32).toString("base64url")}`;
      // Each container its own service identity (services/common/src/rpc/service-identity.ts), both
      // every public key: the gateway's calls to auth are signed and verified as in the chart.
      const ids = Object.fromEntries(["gateway", "auth"].map((name) => [name, serviceIdentity(name)]));
      runEnv.push(
        `SERVICE_IDENTITY_PUBLIC_KEYS=${Object.values(ids)
          .map((i) => i.publicKey)
          .join(",")}`,
      );
      gatewayIdentity = ids.gateway.key;
      // Each its own Kafka user, admitted by the namespace's ACLs (services/common/src/events/kafka-access.ts), as in the chart.
      const namespace = `imagecheck${process.pid}`;
      const { KAFKA_ADMIN_USER: admin, grantKafkaAccess } = await import(
        "../../services/common/dist/events/kafka-access.js"
      );
      const { createKafka, scramUser } = await import("../../services/common/dist/events/kafka.js");
      const { createLogger } = await import("../../services/common/dist/runtime/logger.js");
      await grantKafkaAccess(
        createKafka(
          infra.kafkaBrokers,
          "image-check",
          createLogger("image-check", "error"),
          scramUser(admin, infra.kafkaUsers[admin]),
        ),
        namespace,
      );
      const kafkaUser = (name) => ["-e", `KAFKA_USERNAME=${name}`, "-e", `KAFKA_PASSWORD=${infra.kafkaUsers[name]}`];
      gatewayKafka = kafkaUser("gateway");
      const auth = sh("docker", [
        "run",
        "-d",
        "--name",
        `${containerName}-auth`,
        ...network0,
        ...hardened,
        ...runEnv.flatMap((e) => ["-e", e]),
        ...kafkaUser("auth"),
        "-e",
        "SERVICE=auth",
        "-e",
        `CREDENTIAL_PEPPER=${pepper}`,
        "-e",
        `DATA_KEYS=${dataKeys}`,
        "-e",
        `SERVICE_IDENTITY_KEY=${ids.auth.key}`,
        image,
      ]);
      if (auth.status !== 0) return { status: "failed", reason: `docker run (auth) failed: ${auth.stderr}`, timings };
    } else {
      network0 = ["-p", "127.0.0.1::8080"];
      runEnv = [
        "GATEWAY_HOST=0.0.0.0",
        "KAFKA_BROKERS=127.0.0.1:9",
        "WEBHOOK_ALLOW_INSECURE_URLS=false",
        "LOG_LEVEL=info",
      ];
    }
    const run = sh("docker", [
      "run",
      "-d",
      "--name",
      containerName,
      ...network0,
      ...hardened,
      ...runEnv.flatMap((e) => ["-e", e]),
      ...gatewayKafka,
      "-e",
      `SERVICE_IDENTITY_KEY=${gatewayIdentity}`,
      image,
    ]);
    if (run.status !== 0) return { status: "failed", reason: `docker run failed: ${run.stderr}`, timings };
    const cmdline = sh("docker", ["exec", containerName, "cat", "/proc/1/cmdline"]).stdout.replace(/\0/g, " ").trim();
    if (!gatewayPort)
      gatewayPort = sh("docker", ["port", containerName, "8080/tcp"]).stdout.trim().split("\n")[0].split(":").pop();
    const base_ = `http://127.0.0.1:${gatewayPort}`;
    let status;
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      status = await httpStatus(`${base_}/healthz`);
      if (status === 200) break;
      const state = sh("docker", ["inspect", "-f", "{{.State.Running}}", containerName]).stdout.trim();
      if (state !== "true") break;
      await new Promise((r) => setTimeout(r, 500));
    }
    // /healthz answers as soon as the gateway listens, which can be before the auth container does:
    // with auth beside it, /readyz is read until it no longer lists auth (or the same deadline passes).
    let readyz;
    while (status === 200) {
      readyz = await httpBody(`${base_}/readyz`);
      if (!infra || !authFailing(readyz) || Date.now() >= deadline) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    lap("runSeconds", start);
    const logs = sh("docker", ["logs", "--tail", "8", containerName]);
    const containerLog = `${logs.stdout}${logs.stderr}`.trim();
    const mode = infra ? "gateway and auth containers, test MongoDB and Kafka" : "gateway container alone";
    const expectedCmd = `node ${heapFlagsOfDockerfile().join(" ")} services/${service}/dist/main.js`;
    if (!cmdline.includes(expectedCmd)) {
      return {
        status: "failed",
        reason: `the container runs ${JSON.stringify(cmdline)}, not ${expectedCmd}`,
        timings,
        containerLog,
        mode,
      };
    }
    if (status !== 200) {
      const hint =
        status === undefined && !infra
          ? " The gateway runs alone here (no auth service, no Kafka): it must listen and answer /healthz (liveness) without them, and /readyz 503 until they answer."
          : "";
      return {
        status: "failed",
        reason: `GET /healthz answered ${status ?? "nothing"} within 60 s (${mode}; container ${cmdline}).${hint} Last log lines:\n${containerLog}`,
        timings,
        containerLog,
        mode,
      };
    }
    return {
      status: "passed",
      image,
      base,
      cmdline,
      healthz: status,
      readyz,
      mode,
      timings,
      network: network.length ? "host" : "bridge",
    };
  } catch (err) {
    return { status: "failed", reason: err instanceof Error ? err.message : String(err), timings };
  } finally {
    sh("docker", ["rm", "-f", containerName, `${containerName}-auth`]);
    timings.totalSeconds = Math.round((Date.now() - t0) / 100) / 10;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const contextIdx = process.argv.indexOf("--context");
  const contextDir = contextIdx > 0 ? resolve(process.argv[contextIdx + 1]) : repoRoot;
  const engine = ensureDockerEngine();
  const result = await runImageCheck({ contextDir, engine, noCache: process.argv.includes("--no-cache") });
  stopDockerEngine(engine);
  if (result.status === "skipped") {
    console.error(`IMAGE CHECK SKIPPED (not passed): ${result.reason}`);
  } else if (result.status === "failed") {
    console.error(`IMAGE CHECK FAILED: ${result.reason}`);
  } else {
    console.error(`IMAGE CHECK PASSED: ${result.image} runs ${result.cmdline}; GET /healthz -> ${result.healthz}`);
  }
  console.log(JSON.stringify(result, null, 2));
  process.exit(result.status === "passed" ? 0 : result.status === "skipped" ? 3 : 1);
}
