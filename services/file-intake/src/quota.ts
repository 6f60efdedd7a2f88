import type { FileMode } from "./store.js";
import { forMode } from "@pi/common/rules/mode";

// The storage quota's rules (docs/files.md, "Storage quota"), pure: what an upload reserves, when
// it must reserve more, whether a reservation fits, and what the repair sets a partner's usage to.
// usage.ts applies them to the one usage document per partner and mode.

/** What a partner's files in one mode may hold, accepted and in flight together. */
export interface QuotaLimits {
  live: number;
  test: number;
}

/** A reservation of an upload in flight, kept in the usage document until settled or released. */
export interface Hold {
  id: string;
  bytes: number;
  at: Date;
}

/**
 * The counter of one partner in one mode. `stored` is the plaintext size of its files not swept yet;
 * `used` is `stored` plus every hold's bytes, kept in the same document so one conditional update
 * decides and reserves. `version` is bumped by every write: the repair's compare-and-set
 * (updateVersioned).
 */
export interface Usage {
  stored: number;
  used: number;
  holds: Hold[];
  version: number;
}

/** An upload of unknown length reserves this much at a time as its bytes arrive. */
export const QUOTA_STEP_BYTES = 4 * 1024 * 1024;

export const usageKey = (partnerId: string, mode: FileMode) => `${partnerId}:${mode}`;

export const quotaOf = (limits: QuotaLimits, mode: FileMode) => forMode(limits, mode);

/** What an upload must reserve (`need`) and would rather (`want`): one step ahead when it can. */
export interface Growth {
  need: number;
  want: number;
}

/**
 * Before its first byte: an upload of declared length reserves that (at most MAX_FILE_BYTES); one
 * of unknown length (a chunked body) needs a byte and wants a step.
 */
export function initialHold(declaredBytes: number | undefined, maxFileBytes: number): Growth {
  if (declaredBytes !== undefined)
    return { need: Math.min(declaredBytes, maxFileBytes), want: Math.min(declaredBytes, maxFileBytes) };
  return { need: 1, want: Math.min(QUOTA_STEP_BYTES, maxFileBytes) };
}

/**
 * How much more an upload holding `held` must reserve once `received` bytes arrived (`need`, 0 while
 * they fit) and would rather (`want`: a step ahead, never past MAX_FILE_BYTES). Near the quota a
 * step may not fit where the need does: the caller then takes only the need.
 */
export function holdGrowth(held: number, received: number, maxFileBytes: number): Growth {
  if (received <= held) return { need: 0, want: 0 };
  const need = received - held;
  return { need, want: Math.max(need, Math.min(QUOTA_STEP_BYTES, maxFileBytes - held)) };
}

export type Verdict = { fits: true } | { fits: false; retryAfterSeconds: number };

/**
 * Whether `bytes` more fit. When they do not: if the partner's stored files alone leave room, its
 * own uploads in flight are in the way and end within minutes (retry in a second, as for the
 * concurrency caps); otherwise only the retention sweep frees bytes, and not before its next round.
 */
export function quotaVerdict(
  usage: Pick<Usage, "stored" | "used">,
  quota: number,
  bytes: number,
  sweepEverySeconds: number,
): Verdict {
  if (usage.used + bytes <= quota) return { fits: true };
  return {
    fits: false,
    retryAfterSeconds: usage.stored + bytes <= quota ? 1 : Math.max(1, Math.ceil(sweepEverySeconds)),
  };
}

/**
 * What the repair sets a counter to: `stored` from the files themselves, the holds younger than
 * `holdMaxAgeMs` (an older one is an upload whose process died: no upload lasts that long), and
 * `used` from both. Undefined when the counter is already right.
 */
export function repairedUsage(
  current: Usage,
  storedFromFiles: number,
  now: Date,
  holdMaxAgeMs: number,
): Omit<Usage, "version"> | undefined {
  const holds = current.holds.filter((h) => h.at.getTime() > now.getTime() - holdMaxAgeMs);
  const used = storedFromFiles + holds.reduce((sum, h) => sum + h.bytes, 0);
  if (storedFromFiles === current.stored && used === current.used && holds.length === current.holds.length)
    return undefined;
  return { stored: storedFromFiles, used, holds };
}

/** How close partners are to their quotas: the highest used / quota ratio per mode, and how many partners reach `threshold` in either mode. */
export function quotaPressure(
  counters: { _id: string; used: number }[],
  limits: QuotaLimits,
  threshold: number,
): { maxRatio: Record<FileMode, number>; partnersOver: number } {
  const maxRatio: Record<FileMode, number> = { live: 0, test: 0 };
  const over = new Set<string>();
  for (const counter of counters) {
    const colon = counter._id.lastIndexOf(":");
    const mode = counter._id.slice(colon + 1);
    if (mode !== "live" && mode !== "test") continue;
    const ratio = Math.max(0, counter.used) / quotaOf(limits, mode);
    maxRatio[mode] = Math.max(maxRatio[mode], ratio);
    if (ratio >= threshold) over.add(counter._id.slice(0, colon));
  }
  return { maxRatio, partnersOver: over.size };
}

/**
 * The store-wide high-water mark (docs/files.md, "Store-wide high-water mark"): whether `bytes` more
 * fit under `mark` when every partner's files and uploads in flight hold `total`. Past it the
 * answer is a 503 with this Retry-After: only the retention sweep, or uploads in flight that fail,
 * free room, and a client should not hammer a store that is full.
 */
export const STORE_FULL_RETRY_AFTER_SECONDS = 60;

export function storeHasRoom(total: number, mark: number, bytes: number): boolean {
  return total + bytes <= mark;
}
