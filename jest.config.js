// One jest configuration for the whole repository, one project per test lane (test/lanes.mjs:
// unit, integration, e2e, deploy), so `npm test` runs every lane in one jest run with one set of
// totals and `npm run test:<lane>` runs one (--selectProjects). The code is native ES modules (several
// dependencies ship only as ESM), so jest runs with --experimental-vm-modules and @swc/jest
// strips the types without changing the module system. Workspace packages resolve to their
// TypeScript sources, so tests never need a build of the package under test.
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { LANES, testRegexOf } from "./test/lanes.mjs";

const rootDir = dirname(fileURLToPath(import.meta.url));

/** What every project (and the benchmarks) share. */
export const projectBase = {
  rootDir,
  testEnvironment: "<rootDir>/test/support/node-environment.mjs",
  extensionsToTreatAsEsm: [".ts"],
  transform: {
    "^.+\\.ts$": [
      "@swc/jest",
      { jsc: { parser: { syntax: "typescript" }, target: "es2022" }, module: { type: "es6" }, sourceMaps: "inline" },
    ],
  },
  moduleNameMapper: {
    "^@pi/proto$": "<rootDir>/proto/src/index.ts",
    "^@pi/(auth|connection|file-intake|extraction|webhook|gateway|ops)$": "<rootDir>/services/$1/src/index.ts",
    "^@pi/common/(.+)$": "<rootDir>/services/common/src/$1.ts",
    "^@pi/local-stack$": "<rootDir>/deploy/local/src/index.ts",
    "^@pi/partner-sdk$": "<rootDir>/sdk/typescript/src/index.ts",
    "^(\\.{1,2}/.*)\\.js$": "$1",
  },
  testPathIgnorePatterns: ["/node_modules/", "/dist/"],
  // Builds of earlier releases (the upgrade tests' cache, test/support/releases.ts) are copies of this
  // repository: jest must not see their packages or tests.
  modulePathIgnorePatterns: ["<rootDir>/\\.state/"],
};

/** The MongoDB-wire server and Kafka, started once for every lane that needs them (jest runs a
 * globalSetup module named by several projects once). */
export const testInfra = {
  globalSetup: "<rootDir>/test/support/global-setup.mjs",
  globalTeardown: "<rootDir>/test/support/global-teardown.mjs",
};

/** @type {import('jest').Config} */
export default {
  // The cluster lane runs only through `npm run test:cluster` (jest.cluster.config.js), against an installed release.
  projects: Object.entries(LANES)
    .filter(([, { ownRun }]) => !ownRun)
    .map(([lane, { infra }]) => ({
      ...projectBase,
      displayName: lane,
      testRegex: testRegexOf(lane, rootDir),
      // A lane without the infrastructure is guarded against reaching any server (the unit lane).
      ...(infra ? testInfra : { testEnvironment: "<rootDir>/test/support/unit-environment.mjs" }),
    })),
  // Clean clones have no file durations: the long lanes start first (test/support/sequencer.mjs).
  testSequencer: "<rootDir>/test/support/sequencer.mjs",
  testTimeout: 60_000,
  // Three files at once on this 2-core machine: the whole-stack files spend most of their time
  // waiting (on restarts, leases, Kafka, polling), and a full run kept about half of the CPU idle
  // with two. A CPU-bound unit lane runs no faster with three, and no slower.
  maxWorkers: 3,
  // A fresh worker for every file: a file's leftover grpc-js channels keep reconnecting to the servers
  // it closed, and the next file in that worker (a unit file's connection guard above all) would meet
  // them. Costs about a second of worker start per file.
  workerIdleMemoryLimit: 2,
  verbose: false,
};
