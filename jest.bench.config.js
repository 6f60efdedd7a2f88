// `npm run bench`: the benchmarks under bench/, on the same real infrastructure as the tests.
// They report figures and assert nothing about speed.
import { projectBase, testInfra } from "./jest.config.js";

export default {
  ...projectBase,
  ...testInfra,
  testMatch: ["<rootDir>/bench/**/*.bench.ts"],
  testTimeout: 300_000,
  maxWorkers: 1,
};
