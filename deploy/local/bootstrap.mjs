// The first thing `npm start`, `npm test`, `npm run test:<lane>` and `npm run bench` run, in plain
// JavaScript so that it works on a fresh clone: installs the Node dependencies when they are missing,
// builds what is stale (tsc -b is incremental; the unit lane runs the TypeScript sources and needs no
// build), then hands over to the compiled command or to jest.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { LANES } from "../../test/lanes.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const [command = "start", ...rest] = process.argv.slice(2);
// `test:unit`, `test:integration`, ...: one lane of test/lanes.mjs, a jest project of jest.config.js.
const lane = command.startsWith("test:") ? command.slice("test:".length) : undefined;
if (lane !== undefined && !Object.hasOwn(LANES, lane)) {
  process.stderr.write(`unknown test lane ${lane}; the lanes are ${Object.keys(LANES).join(", ")}\n`);
  process.exit(2);
}

function step(line) {
  process.stderr.write(
    `${JSON.stringify({ level: "info", time: new Date().toISOString(), service: "bootstrap", msg: line })}\n`,
  );
}

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
  if (r.status !== 0) {
    process.stderr.write(`${cmd} ${args.join(" ")} failed (exit ${r.status ?? r.signal})\n`);
    process.exit(1);
  }
}

if (!existsSync(join(root, "node_modules", ".package-lock.json"))) {
  step("installing Node dependencies (npm ci)");
  // --prefer-offline: what the npm cache holds is taken without asking the registry (7 s of 35 here).
  run("npm", [
    ...(existsSync(join(root, "package-lock.json")) ? ["ci"] : ["install"]),
    "--no-audit",
    "--no-fund",
    "--prefer-offline",
  ]);
}
/** The newest modification time of a file under `path` (a file or a directory), 0 if none. */
function newest(path) {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((name) => newest(join(path, name))));
}

/**
 * Whether every project of tsconfig.json was built, without errors, after its last change. tsc -b
 * finds the same, but takes 5 to 15 s to load itself and the projects' graphs: a restart of
 * `npm start` must be ready in under 60 s (operator contract), on a loaded machine too.
 */
function buildIsFresh() {
  const projects = JSON.parse(readFileSync(join(root, "tsconfig.json"), "utf8")).references.map((r) =>
    join(root, r.path),
  );
  const shared = newest(join(root, "tsconfig.base.json"));
  return projects.every((dir) => {
    const info = join(dir, "tsconfig.tsbuildinfo");
    if (!existsSync(info) || !existsSync(join(dir, "dist")) || readFileSync(info, "utf8").includes('"errors":true'))
      return false;
    const inputs = Math.max(
      shared,
      newest(join(dir, "src")),
      newest(join(dir, "tsconfig.json")),
      newest(join(dir, "package.json")),
    );
    return inputs < statSync(info).mtimeMs;
  });
}

if ((lane === undefined || LANES[lane].build) && !buildIsFresh()) {
  step("building (tsc -b)");
  run(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-b"]);
}

switch (command) {
  case "start":
    await import("./dist/start.js");
    break;
  case "test":
  case `test:${lane}`:
  case "bench": {
    const jest = join(root, "node_modules", "jest", "bin", "jest.js");
    const config = command === "bench" ? ["--config", "jest.bench.config.js", "--runInBand"] : [];
    // After the arguments given: --selectProjects takes every word that follows it.
    const select = lane ? ["--selectProjects", lane] : [];
    // A larger young generation for the tests (jest's workers inherit it): each test file loads its
    // modules afresh, and with the default one the unit lane took about 9 % more CPU. Not for the
    // bench, whose figures stay comparable with the figures of record.
    const heap = command === "bench" ? [] : ["--max-semi-space-size=32"];
    const args = [
      "--experimental-vm-modules",
      "--no-warnings=ExperimentalWarning",
      ...heap,
      jest,
      ...config,
      ...rest,
      ...select,
    ];
    const child = spawn(process.execPath, args, { cwd: root, stdio: "inherit" });
    for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal));
    child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
    break;
  }
  default:
    process.stderr.write(`unknown command ${command}; use start, test, test:<lane> or bench\n`);
    process.exit(2);
}
