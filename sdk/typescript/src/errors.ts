import type { components } from "./gen/api.js";

type Schemas = components["schemas"];
type CodeOf<S> = S extends { error?: { code?: infer C } } ? Exclude<C, undefined> : never;

/** Every `error.code` the OpenAPI document names for a `/v1` error, from the generated types. */
export type ErrorCode = {
  [K in keyof Schemas]: K extends `${string}Error` ? CodeOf<Schemas[K]> : never;
}[keyof Schemas];

/** The token endpoint's error codes (RFC 6749 section 5.2). */
export type OAuthErrorCode = Schemas["OAuthError"]["error"];

/** A `/v1` error answer: branch on `code`; `message` is for people and may change. */
export class PartnerApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly type: string,
    readonly param?: string,
    /** Seconds, from the Retry-After header of a 429 or 503. */
    readonly retryAfter?: number,
  ) {
    super(message);
    this.name = "PartnerApiError";
  }
}

/** The token endpoint refused the request (`invalid_client` for any credential failure). */
export class OAuthTokenError extends Error {
  constructor(
    readonly status: number,
    readonly code: OAuthErrorCode,
    description?: string,
  ) {
    super(description ?? code);
    this.name = "OAuthTokenError";
  }
}

/** No answer came (connection refused or reset, timeout). */
export class NetworkError extends Error {
  constructor(override readonly cause: unknown) {
    super(`network error: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = "NetworkError";
  }
}
