import { checkElderAddress } from "@pi/common/rules/elder-address";
import { ErrorReason, RpcError, Status, serviceError } from "@pi/common/rpc/errors";
import type { AcceptedType } from "@pi/common/rules/media-types";
import type { ClaimOutcome } from "./keys.js";

// The verdicts on an upload, pure and in the order file-intake takes them (docs/files.md, "Order of
// checks"): the quota at the header (usage.ts), then the file's bytes (size, type, plain text), the
// trailer (empty file, text to its last byte, the gateway's refusal, elder), and last what ran at
// once: storage, idempotency, connection. Each returns the refusal, or undefined to go on.

export const tooLarge = () => serviceError(ErrorReason.FILE_TOO_LARGE, "the file is larger than the limit", "file");
export const unsupported = () =>
  serviceError(ErrorReason.UNSUPPORTED_MEDIA_TYPE, "the file's type is not accepted", "file");
export const protocol = (message: string) => new RpcError(message, Status.INVALID_ARGUMENT);

/** What the file's bytes are so far: `type` once the head is read (null: not accepted), `text` false once they stop being plain text. */
export interface Bytes {
  size: number;
  maxBytes: number;
  type?: AcceptedType | null;
  text: boolean;
}

/** After each chunk: size first (it is known first), then the type once known, then the text rule. */
export function bytesVerdict(b: Bytes): RpcError | undefined {
  if (b.size > b.maxBytes) return tooLarge();
  if (b.type === null || !b.text) return unsupported();
  return undefined;
}

/**
 * At the trailer. A file that ended is judged whole (empty, text to its last byte); the gateway's
 * refusal then wins over the fields; `elder` last.
 */
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

/**
 * The verdicts of storing the last bytes and claiming the key (run at once), in that order: a
 * failure of either, a replay of an earlier receipt, a key reused with another payload, else go on
 * (to the connection, which is last: its "no" must be the same whatever came before).
 */
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
