// One jest configuration for the whole repository. The code is native ES modules (several
// dependencies ship only as ESM), so jest runs with --experimental-vm-modules and @swc/jest
// strips the types without changing the module system. Workspace packages resolve to their
// TypeScript sources, so tests never need a build of the package under test.
/** @type {import('jest').Config} */
export default {
  testEnvironment: "node",
  extensionsToTreatAsEsm: [".ts"],
  transform: {
    "^.+\\.ts$": ["@swc/jest", { jsc: { parser: { syntax: "typescript" }, target: "es2022" }, module: { type: "es6" }, sourceMaps: "inline" }],
  },
  moduleNameMapper: {
    "^@pi/proto$": "<rootDir>/proto/src/index.ts",
    "^@pi/(common|auth|connection|file-intake|webhook|gateway|ops)$": "<rootDir>/services/$1/src/index.ts",
    "^@pi/local-stack$": "<rootDir>/deploy/local/src/index.ts",
    "^(\\.{1,2}/.*)\\.js$": "$1",
  },
  testMatch: [
    "<rootDir>/proto/test/**/*.test.ts",
    "<rootDir>/services/*/test/**/*.test.ts",
    "<rootDir>/deploy/*/test/**/*.test.ts",
    "<rootDir>/test/**/*.test.ts",
  ],
  // test/cluster needs an installed release: `npm run test:cluster` runs it (jest.cluster.config.js).
  testPathIgnorePatterns: ["/node_modules/", "/dist/", "<rootDir>/test/cluster/"],
  globalSetup: "<rootDir>/test/support/global-setup.mjs",
  globalTeardown: "<rootDir>/test/support/global-teardown.mjs",
  testTimeout: 60_000,
  maxWorkers: 2,
  verbose: false,
};
