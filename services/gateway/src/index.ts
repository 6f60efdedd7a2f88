export { startGateway, startWarmGateway } from "./service.js";
export { createApp } from "./app.js";
export * from "./errors.js";
export { OPENAPI_FILE, openApiDocument } from "./openapi.js";
