import { type Context, HttpError } from "koa";
import { ErrorReason, reasonOf, RpcError, Status } from "@pi/common/rpc/errors";
import type { commonv1 } from "@pi/proto";

// The one table of partner-facing errors: a code always has the same status, type and message,
// which is what the no-oracle guarantees rest on (one 404 body for unknown and foreign ids).
export const PARTNER_ERRORS = {
  invalid_request: { status: 400, type: "invalid_request_error", message: "The request is malformed." },
  unauthorized: {
    status: 401,
    type: "authentication_error",
    message: "The bearer token is missing, malformed, invalid, expired or revoked.",
  },
  insufficient_scope: {
    status: 403,
    type: "permission_error",
    message: "The access token lacks the scope this operation requires.",
  },
  no_active_connection: {
    status: 403,
    type: "permission_error",
    message: "There is no active connection to this elder.",
  },
  not_found: { status: 404, type: "invalid_request_error", message: "No such resource." },
  method_not_allowed: {
    status: 405,
    type: "invalid_request_error",
    message: "The method is not allowed on this resource.",
  },
  request_timeout: {
    status: 408,
    type: "invalid_request_error",
    message: "The request body arrived more slowly than the minimum rate.",
  },
  idempotency_key_reuse: {
    status: 409,
    type: "invalid_request_error",
    message: "This Idempotency-Key was used with a different payload.",
  },
  file_too_large: { status: 413, type: "invalid_request_error", message: "The file is larger than the limit." },
  unsupported_media_type: { status: 415, type: "invalid_request_error", message: "The media type is not accepted." },
  rate_limited: {
    status: 429,
    type: "rate_limit_error",
    message: "Too many requests; retry after the number of seconds in Retry-After.",
  },
  internal_error: { status: 500, type: "api_error", message: "Something went wrong on our side." },
  service_unavailable: {
    status: 503,
    type: "api_error",
    message: "The service is temporarily unavailable; retry shortly.",
  },
} as const;

export type PartnerErrorCode = keyof typeof PARTNER_ERRORS;

/** Thrown anywhere in a handler; rendered as the envelope by sendPartnerError. */
export class PartnerError extends Error {
  constructor(
    readonly code: PartnerErrorCode,
    readonly detail: { message?: string; param?: string; headers?: Record<string, string> } = {},
  ) {
    super(detail.message ?? PARTNER_ERRORS[code].message);
  }
}

export const invalid = (message: string, param?: string) => new PartnerError("invalid_request", { message, param });

export function envelope(code: PartnerErrorCode, message?: string, param?: string) {
  const { type } = PARTNER_ERRORS[code];
  return {
    error: { type, code, message: message ?? PARTNER_ERRORS[code].message, ...(param !== undefined ? { param } : {}) },
  };
}

/**
 * Internal reasons and the partner error each stands for. A refusal that says when to retry carries
 * the Retry-After to give when the reason names none, and may have a message of its own.
 */
const fromReason: Partial<
  Record<commonv1.ErrorReason, { code: PartnerErrorCode; retryAfter?: number; message?: string }>
> = {
  [ErrorReason.INVALID_REQUEST]: { code: "invalid_request" },
  [ErrorReason.NOT_FOUND]: { code: "not_found" },
  [ErrorReason.NO_ACTIVE_CONNECTION]: { code: "no_active_connection" },
  [ErrorReason.IDEMPOTENCY_KEY_REUSE]: { code: "idempotency_key_reuse" },
  [ErrorReason.FILE_TOO_LARGE]: { code: "file_too_large" },
  [ErrorReason.UNSUPPORTED_MEDIA_TYPE]: { code: "unsupported_media_type" },
  // file-intake's reservation, at the header (Retry-After from what is in the way) or mid-stream (1)
  [ErrorReason.STORAGE_QUOTA_EXCEEDED]: {
    code: "rate_limited",
    retryAfter: 1,
    message:
      "Your stored files in this mode have reached their storage quota; retry after the number of seconds in Retry-After.",
  },
  // a per-partner bound of a service (pending connections, reopenings): the one rate_limited answer,
  // the same whichever bound and whatever the request named (guarantee 1)
  [ErrorReason.RATE_LIMITED]: { code: "rate_limited", retryAfter: 1 },
  // the store as a whole is near full (file-intake's high-water mark): an outage, not the partner's doing
  [ErrorReason.STORE_FULL]: { code: "service_unavailable", retryAfter: 60 },
};

const httpStatusToCode: Record<number, PartnerErrorCode> = {
  404: "not_found",
  405: "method_not_allowed",
  415: "unsupported_media_type",
};

/**
 * Maps a failure of an internal call to the partner error it stands for. Reasons are mapped to
 * their fixed codes (and messages: an internal message never reaches a partner, except the
 * field-level explanation of an invalid request); an unreachable service is a 503; anything else
 * is a 500.
 */
export function partnerErrorFromInternal(err: unknown): PartnerError {
  if (err instanceof PartnerError) return err;
  const reason = reasonOf(err);
  const mapped = reason && fromReason[reason.reason];
  if (mapped?.retryAfter !== undefined) {
    const headers = { "Retry-After": String(reason!.retryAfterSeconds ?? mapped.retryAfter) };
    return new PartnerError(mapped.code, { message: mapped.message, headers });
  }
  if (mapped) {
    const message = mapped.code === "invalid_request" && err instanceof RpcError ? err.message : undefined;
    return new PartnerError(mapped.code, { message, param: reason.param });
  }
  if (err instanceof RpcError && (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED)) {
    return new PartnerError("service_unavailable", { headers: { "Retry-After": "1" } });
  }
  // A client mistake Koa or a library reports as an http-errors 4xx is never a 500.
  if (err instanceof HttpError && err.expose && err.status < 500)
    return new PartnerError(httpStatusToCode[err.status] ?? "invalid_request");
  // The cause goes to the log line of the 500, never to the partner.
  return Object.assign(new PartnerError("internal_error"), { cause: err });
}

export function sendPartnerError(ctx: Context, err: PartnerError, requestId?: string): void {
  const def = PARTNER_ERRORS[err.code];
  ctx.status = def.status;
  for (const [name, value] of Object.entries(err.detail.headers ?? {})) ctx.set(name, value);
  const message =
    err.code === "internal_error" && requestId ? `${def.message} Request id: ${requestId}.` : err.detail.message;
  ctx.body = envelope(err.code, message, err.detail.param);
}
