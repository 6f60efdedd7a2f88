export { startGateway } from "./service.js";
export { createApp } from "./app.js";
export * from "./errors.js";
