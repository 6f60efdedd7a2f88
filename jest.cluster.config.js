// jest for `npm run test:cluster` (deploy/cluster/test-cluster.sh): the black-box suite and the
// cluster tests against an installed release, with no local test infrastructure (no globalSetup).
import base from "./jest.config.js";

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ["<rootDir>/test/blackbox/**/*.test.ts", "<rootDir>/test/cluster/**/*.test.ts"],
  testPathIgnorePatterns: ["/node_modules/", "/dist/"],
  globalSetup: undefined,
  globalTeardown: undefined,
  testTimeout: 600_000,
  maxWorkers: 1,
};
