// `npm run bench`: the benchmarks under bench/, on the same real infrastructure as the tests.
// They report figures and assert nothing about speed.
import base from "./jest.config.js";

export default {
  ...base,
  testMatch: ["<rootDir>/bench/**/*.bench.ts"],
  testTimeout: 300_000,
  maxWorkers: 1,
};
