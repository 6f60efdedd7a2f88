export { startAuthService, type AuthServiceOptions } from "./service.js";
export * from "./scopes.js";
export * from "./secrets.js";
export * from "./tokens.js";
