export * from "./infra.js";
export * from "./paths.js";
export * from "./stack.js";
export * from "./supervisor.js";
export * from "./test-infra.js";
