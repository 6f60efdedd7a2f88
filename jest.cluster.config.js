// jest for `npm run test:cluster` (deploy/cluster/test-cluster.sh): the black-box suite and the
// cluster lane (test/lanes.mjs) against an installed release, with no local test infrastructure.
import { projectBase } from "./jest.config.js";

/** @type {import('jest').Config} */
export default {
  ...projectBase,
  testMatch: ["<rootDir>/test/blackbox/**/*.test.ts", "<rootDir>/test/cluster/**/*.test.ts"],
  // The upgrade from the previous release is a step of its own, before this release is installed
  // (test-cluster.sh runs it by name, with these patterns reset).
  testPathIgnorePatterns: [...projectBase.testPathIgnorePatterns, "/test/cluster/release-upgrade\\.test\\.ts$"],
  testTimeout: 600_000,
  maxWorkers: 1,
};
