// The partner SDK: a typed client of the partner integration API. Its types are generated from the
// OpenAPI document (src/gen/api.ts, by openapi-typescript; `npm run generate -w sdk/typescript`).
export {
  PartnerClient,
  type Connection,
  type EventList,
  type EventsOptions,
  type FileReceipt,
  type ListedEvent,
  type PartnerClientOptions,
  type SendFileInput,
  type TestHelpers,
} from "./client.js";
export { NetworkError, OAuthTokenError, PartnerApiError, type ErrorCode, type OAuthErrorCode } from "./errors.js";
export { RETRYABLE_STATUSES, type RetryOptions } from "./retry.js";
export {
  basicCredentials,
  CLIENT_ASSERTION_TYPE,
  TokenSource,
  type AssertionAlgorithm,
  type TokenSourceOptions,
} from "./token.js";
export { verifyWebhook, WebhookVerificationError, type VerifyOptions, type WebhookEvent } from "./webhooks.js";
export type { components, paths, webhooks } from "./gen/api.js";
