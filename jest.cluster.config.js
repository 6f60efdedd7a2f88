// jest for `npm run test:cluster` (deploy/cluster/test-cluster.sh): the black-box suite and the
// cluster lane (test/lanes.mjs) against an installed release, with no local test infrastructure.
import { projectBase } from "./jest.config.js";

/** @type {import('jest').Config} */
export default {
  ...projectBase,
  testMatch: ["<rootDir>/test/blackbox/**/*.test.ts", "<rootDir>/test/cluster/**/*.test.ts"],
  testTimeout: 600_000,
  maxWorkers: 1,
};
