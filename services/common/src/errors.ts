import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { commonv1 } from "@pi/proto";

const { ErrorReason, ErrorDetailSchema } = commonv1;
export { ErrorReason };

const codeOf: Record<commonv1.ErrorReason, Code> = {
  [ErrorReason.UNSPECIFIED]: Code.Internal,
  [ErrorReason.INVALID_REQUEST]: Code.InvalidArgument,
  [ErrorReason.NOT_FOUND]: Code.NotFound,
  [ErrorReason.NO_ACTIVE_CONNECTION]: Code.PermissionDenied,
  [ErrorReason.IDEMPOTENCY_KEY_REUSE]: Code.Aborted,
  [ErrorReason.FILE_TOO_LARGE]: Code.ResourceExhausted,
  [ErrorReason.UNSUPPORTED_MEDIA_TYPE]: Code.InvalidArgument,
  [ErrorReason.STORAGE_QUOTA_EXCEEDED]: Code.ResourceExhausted,
  [ErrorReason.RATE_LIMITED]: Code.ResourceExhausted,
  [ErrorReason.STORE_FULL]: Code.ResourceExhausted,
};

/** An error an internal service raises on purpose; the gateway maps its reason to a partner error. */
export function serviceError(
  reason: commonv1.ErrorReason,
  message: string,
  param?: string,
  retryAfterSeconds?: number,
): ConnectError {
  return new ConnectError(message, codeOf[reason], undefined, [
    {
      desc: ErrorDetailSchema,
      value: create(ErrorDetailSchema, { reason, param: param ?? "", retryAfterSeconds: retryAfterSeconds ?? 0 }),
    },
  ]);
}

/** A per-partner bound was reached (RATE_LIMITED): the partner's 429, to retry after `retryAfterSeconds`. */
export const rateLimitedError = (message: string, retryAfterSeconds: number) =>
  serviceError(ErrorReason.RATE_LIMITED, message, undefined, Math.max(1, Math.ceil(retryAfterSeconds)));

/** The reason carried by an error from serviceError, or undefined for any other failure. */
export function reasonOf(
  err: unknown,
): { reason: commonv1.ErrorReason; param?: string; retryAfterSeconds?: number } | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  const [detail] = err.findDetails(ErrorDetailSchema);
  if (!detail) return undefined;
  return {
    reason: detail.reason,
    param: detail.param || undefined,
    retryAfterSeconds: detail.retryAfterSeconds || undefined,
  };
}
