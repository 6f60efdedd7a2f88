export { startAuthService, type AuthServiceOptions } from "./service.js";
export { SecretSealer } from "./secrets.js";
