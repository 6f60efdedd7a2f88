import { checkElderAddress } from "@pi/common/rules/elder-address";
import { ErrorReason, RpcError, Status, serviceError } from "@pi/common/rpc/errors";
import type { AcceptedType } from "@pi/common/rules/media-types";
import type { ClaimOutcome } from "./keys.js";

// The verdicts on an upload, pure, in the order intake.ts takes them (docs/files.md, "Order of
// checks"). Each returns the refusal, or undefined to go on.

export const tooLarge = () => serviceError(ErrorReason.FILE_TOO_LARGE, "the file is larger than the limit", "file");
export const unsupported = () =>
  serviceError(ErrorReason.UNSUPPORTED_MEDIA_TYPE, "the file's type is not accepted", "file");
export const protocol = (message: string) => new RpcError(message, Status.INVALID_ARGUMENT);

/** The file's bytes so far: `type` once the head is read (null: not accepted), `text` false once not plain text. */
export interface Bytes {
  size: number;
  maxBytes: number;
  type?: AcceptedType | null;
  text: boolean;
}

/** After each chunk: size, then type, then the text rule. */
export function bytesVerdict(b: Bytes): RpcError | undefined {
  if (b.size > b.maxBytes) return tooLarge();
  if (b.type === null || !b.text) return unsupported();
  return undefined;
}

/** At the trailer: a file that ended is judged whole, then the gateway's refusal, `elder` last. */
export function trailerVerdict(
  t: { elderAddress: string; refused?: boolean; fileComplete?: boolean },
  file: { size: number; textEnds: () => boolean },
  domain: string,
): { refusal: RpcError } | { elder: string } {
  const complete = !t.refused || t.fileComplete;
  if (complete && file.size === 0)
    return { refusal: serviceError(ErrorReason.INVALID_REQUEST, "The file is empty.", "file") };
  if (complete && !file.textEnds()) return { refusal: unsupported() };
  if (t.refused) return { refusal: new RpcError("the gateway refused the body", Status.FAILED_PRECONDITION) };
  const elder = checkElderAddress(t.elderAddress, domain);
  if (!elder.ok) return { refusal: serviceError(ErrorReason.INVALID_REQUEST, `elder ${elder.reason}.`, "elder") };
  return { elder: elder.address };
}

type Settled<T> = PromiseSettledResult<T>;

/** Storing the last bytes, then the key's claim (run at once); the connection comes last, its "no" always the same. */
export function claimVerdict(
  stored: Settled<void>,
  claim: Settled<ClaimOutcome | undefined>,
): { refusal: unknown } | { replay: string } | undefined {
  if (stored.status === "rejected") return { refusal: stored.reason };
  if (claim.status === "rejected") return { refusal: claim.reason };
  if (claim.value?.kind === "replay") return { replay: claim.value.fileId };
  if (claim.value?.kind === "conflict")
    return {
      refusal: serviceError(
        ErrorReason.IDEMPOTENCY_KEY_REUSE,
        "this Idempotency-Key was used with a different payload",
        "Idempotency-Key",
      ),
    };
  return undefined;
}

export const noActiveConnection = () => serviceError(ErrorReason.NO_ACTIVE_CONNECTION, "no active connection");
