import { createHash } from "node:crypto";
import type { PartnerMode } from "@pi/common/rules/mode";

// The rules of Idempotency-Key on POST /v1/files, as plain functions (the store applies them).
//
// A key belongs to one partner in one credential mode (test and live share nothing: a test request
// can neither see nor block a live key) and is kept IDEMPOTENCY_TTL_SECONDS from its first
// successful use. Two requests carry "the same payload" when
// their fingerprints are equal: the SHA-256 of the file bytes, the elder address after
// normalisation (lower case), the purpose exactly as sent (absent differs from empty) and the
// credential mode. The client's file name and declared Content-Type are not part of it.

export interface Payload {
  /** Lowercase hex SHA-256 of the file's bytes. */
  sha256: string;
  /** The normalised elder address. */
  elder: string;
  purpose: string | null;
  mode: PartnerMode;
}

export function fingerprint(p: Payload): string {
  // JSON of a fixed-order array: no two different payloads serialise alike.
  return createHash("sha256")
    .update(JSON.stringify(["v1", p.sha256, p.elder, p.purpose, p.mode]))
    .digest("hex");
}

/** What is stored per (partner, mode, key). `fileId` is chosen when the key is claimed, before the commit. */
export interface KeyRecord {
  fingerprint: string;
  fileId: string;
  state: "claimed" | "committed";
  /** Until when the claiming request holds it (kept alive while it works); past it, abandoned. */
  claimedUntil: Date;
  expiresAt: Date;
}

export type Decision =
  /** This request's own claim: go on with the checks and commit. */
  | { kind: "owned" }
  /** The same payload was accepted before: answer its receipt again. */
  | { kind: "replay"; fileId: string }
  /** The key was used with another payload. */
  | { kind: "conflict" }
  /** The same payload is being accepted by a request still in progress: wait for its outcome. */
  | { kind: "wait" }
  /** Kept past its retention (not swept yet): as if absent. */
  | { kind: "expired" }
  /** Claimed by a request that has not finished within the claim lease (its process died). */
  | { kind: "abandoned" };

/**
 * Decides what a request with `incoming` does about the record stored under its key (which is its
 * own when its claim won the insert). Expiry comes first so that the outcome does not depend on when
 * the sweep runs; an abandoned claim is taken over whatever its payload.
 */
export function decide(stored: KeyRecord, incoming: { fingerprint: string; fileId: string }, now: Date): Decision {
  if (stored.fileId === incoming.fileId && stored.state === "claimed") return { kind: "owned" };
  if (stored.expiresAt.getTime() <= now.getTime()) return { kind: "expired" };
  if (stored.state === "claimed" && stored.claimedUntil.getTime() <= now.getTime()) return { kind: "abandoned" };
  if (stored.fingerprint !== incoming.fingerprint) return { kind: "conflict" };
  if (stored.state === "committed") return { kind: "replay", fileId: stored.fileId };
  return { kind: "wait" };
}
