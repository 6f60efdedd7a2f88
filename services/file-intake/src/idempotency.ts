import { createHash } from "node:crypto";
import type { PartnerMode } from "@pi/common/rules/mode";

// The rules of Idempotency-Key on POST /v1/files (keys.ts applies them). "The same payload": the
// file's SHA-256, the normalised elder, the purpose as sent (absent differs from empty) and the mode.

export interface Payload {
  sha256: string;
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

/** What is stored per (partner, mode, key); `fileId` is chosen at the claim. */
export interface KeyRecord {
  fingerprint: string;
  fileId: string;
  state: "claimed" | "committed";
  /** Past it, the claim is abandoned. */
  claimedUntil: Date;
  expiresAt: Date;
}

export type Decision =
  /** This request's own claim: go on with the checks and commit. */
  | { kind: "owned" }
  /** The same payload was accepted before: answer its receipt again. */
  | { kind: "replay"; fileId: string }
  | { kind: "conflict" }
  /** The same payload is being accepted by a request still in progress: wait for its outcome. */
  | { kind: "wait" }
  /** Kept past its retention (not swept yet): as if absent. */
  | { kind: "expired" }
  /** Claimed by a request that has not finished within the claim lease (its process died). */
  | { kind: "abandoned" };

/** What a request does about the record under its key; expiry first, so the sweep's timing does not matter. */
export function decide(stored: KeyRecord, incoming: { fingerprint: string; fileId: string }, now: Date): Decision {
  if (stored.fileId === incoming.fileId && stored.state === "claimed") return { kind: "owned" };
  if (stored.expiresAt.getTime() <= now.getTime()) return { kind: "expired" };
  if (stored.state === "claimed" && stored.claimedUntil.getTime() <= now.getTime()) return { kind: "abandoned" };
  if (stored.fingerprint !== incoming.fingerprint) return { kind: "conflict" };
  if (stored.state === "committed") return { kind: "replay", fileId: stored.fileId };
  return { kind: "wait" };
}
