import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyPack, anyUnpack } from "@bufbuild/protobuf/wkt";
import { Metadata, status as Status } from "@grpc/grpc-js";
import { commonv1, rpcstatus } from "@pi/proto";

const { ErrorReason, ErrorDetailSchema } = commonv1;
const { StatusSchema } = rpcstatus;
export { ErrorReason, Status };

type ErrorDetail = commonv1.ErrorDetail;

/** A failed internal call, on either side: a gRPC status code, its message and our ErrorDetail, if any. */
export class RpcError extends Error {
  constructor(
    message: string,
    readonly code: Status,
    readonly detail?: ErrorDetail,
    cause?: unknown,
  ) {
    super(message, { cause });
    this.name = "RpcError";
  }

  /** `err` itself, or an UNKNOWN error in its place. */
  static from(err: unknown): RpcError {
    return err instanceof RpcError
      ? err
      : new RpcError(String((err as Error)?.message ?? err), Status.UNKNOWN, undefined, err);
  }
}

// The detail travels as a google.rpc.Status in grpc-status-details-bin, as 1.0.0's clients read it.
const DETAILS_KEY = "grpc-status-details-bin";

/** The trailers that carry an error's detail to the caller (none without one). */
export function trailersOf(err: RpcError): Metadata | undefined {
  if (!err.detail) return undefined;
  const status = create(StatusSchema, {
    code: err.code,
    message: err.message,
    details: [anyPack(ErrorDetailSchema, err.detail)],
  });
  const metadata = new Metadata();
  metadata.set(DETAILS_KEY, Buffer.from(toBinary(StatusSchema, status)));
  return metadata;
}

/** The ErrorDetail a caller received in its trailers, if any. */
export function detailOf(metadata: Metadata | undefined): ErrorDetail | undefined {
  const [bytes] = metadata?.get(DETAILS_KEY) ?? [];
  if (!(bytes instanceof Buffer)) return undefined;
  const [detail] = fromBinary(StatusSchema, bytes).details;
  return detail && anyUnpack(detail, ErrorDetailSchema);
}

const codeOf: Record<commonv1.ErrorReason, Status> = {
  [ErrorReason.UNSPECIFIED]: Status.INTERNAL,
  [ErrorReason.INVALID_REQUEST]: Status.INVALID_ARGUMENT,
  [ErrorReason.NOT_FOUND]: Status.NOT_FOUND,
  [ErrorReason.NO_ACTIVE_CONNECTION]: Status.PERMISSION_DENIED,
  [ErrorReason.IDEMPOTENCY_KEY_REUSE]: Status.ABORTED,
  [ErrorReason.FILE_TOO_LARGE]: Status.RESOURCE_EXHAUSTED,
  [ErrorReason.UNSUPPORTED_MEDIA_TYPE]: Status.INVALID_ARGUMENT,
  [ErrorReason.STORAGE_QUOTA_EXCEEDED]: Status.RESOURCE_EXHAUSTED,
  [ErrorReason.RATE_LIMITED]: Status.RESOURCE_EXHAUSTED,
  [ErrorReason.STORE_FULL]: Status.RESOURCE_EXHAUSTED,
};

/** An error an internal service raises on purpose; the gateway maps its reason to a partner error. */
export function serviceError(
  reason: commonv1.ErrorReason,
  message: string,
  param?: string,
  retryAfterSeconds?: number,
): RpcError {
  return new RpcError(message, codeOf[reason], create(ErrorDetailSchema, { reason, param, retryAfterSeconds }));
}

/** A per-partner bound was reached (RATE_LIMITED): the partner's 429, to retry after `retryAfterSeconds`. */
export const rateLimitedError = (message: string, retryAfterSeconds: number) =>
  serviceError(ErrorReason.RATE_LIMITED, message, undefined, Math.max(1, Math.ceil(retryAfterSeconds)));

/** The reason carried by an error from serviceError, or undefined for any other failure. */
export function reasonOf(err: unknown) {
  const detail = err instanceof RpcError ? err.detail : undefined;
  return (
    detail && {
      reason: detail.reason,
      param: detail.param || undefined,
      retryAfterSeconds: detail.retryAfterSeconds || undefined,
    }
  );
}
