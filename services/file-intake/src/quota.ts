import type { PartnerMode as FileMode } from "@pi/common/rules/mode";

// The storage quota's pure rules (docs/files.md, "Storage quota"); usage.ts applies them.

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

/** `used` is `stored` plus every hold, so one conditional update decides and reserves; `version` is the repair's CAS. */
export interface Usage {
  stored: number;
  used: number;
  holds: Hold[];
  version: number;
}

/** An upload of unknown length reserves this much at a time as its bytes arrive. */
export const QUOTA_STEP_BYTES = 4 * 1024 * 1024;

export const usageKey = (partnerId: string, mode: FileMode) => `${partnerId}:${mode}`;

/** What an upload must reserve (`need`) and would rather (`want`): one step ahead when it can. */
export interface Growth {
  need: number;
  want: number;
}

/** Before its first byte: the declared length (at most MAX_FILE_BYTES), or for a chunked body a byte and a step. */
export function initialHold(declaredBytes: number | undefined, maxFileBytes: number): Growth {
  if (declaredBytes !== undefined)
    return { need: Math.min(declaredBytes, maxFileBytes), want: Math.min(declaredBytes, maxFileBytes) };
  return { need: 1, want: Math.min(QUOTA_STEP_BYTES, maxFileBytes) };
}

/** What an upload holding `held` must add once `received` bytes arrived, and a step ahead it would rather add. */
export function holdGrowth(held: number, received: number, maxFileBytes: number): Growth {
  if (received <= held) return { need: 0, want: 0 };
  const need = received - held;
  return { need, want: Math.max(need, Math.min(QUOTA_STEP_BYTES, maxFileBytes - held)) };
}

export type Verdict = { fits: true } | { fits: false; retryAfterSeconds: number };

/** Whether `bytes` more fit; if not, retry in 1 s when only uploads in flight are in the way, else after the next sweep. */
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

/** What the repair sets a counter to (holds older than `holdMaxAgeMs` are dead uploads); undefined when right. */
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
    const ratio = Math.max(0, counter.used) / limits[mode];
    maxRatio[mode] = Math.max(maxRatio[mode], ratio);
    if (ratio >= threshold) over.add(counter._id.slice(0, colon));
  }
  return { maxRatio, partnersOver: over.size };
}

/** Past the store-wide high-water mark only the retention sweep frees room: a client should not hammer it. */
export const STORE_FULL_RETRY_AFTER_SECONDS = 60;
