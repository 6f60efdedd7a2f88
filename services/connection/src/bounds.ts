import type { InternalStatus } from "./state-machine.js";

// The per-partner bounds on POST /v1/connections (docs/connections.md, "Bounds"), pure. Nothing here
// depends on whether an address resolved (guarantee 1).

/** A declined connection reads as pending (the spec), so it keeps its slot as a pending one does. */
export const holdsSlot = (status: InternalStatus): boolean => status === "pending" || status === "declined";

export function slotChange(from: InternalStatus, to: InternalStatus): "take" | "release" | "none" {
  if (!holdsSlot(from) && holdsSlot(to)) return "take";
  if (holdsSlot(from) && !holdsSlot(to)) return "release";
  return "none";
}

/** When a slot frees cannot be foreseen: a full partner is told to try again in a minute. */
export const PENDING_RETRY_AFTER_SECONDS = 60;

/** How long until a connection may reopen again; undefined when it may now. */
export function reopenWaitSeconds(reopenedAt: Date | null | undefined, now: Date, intervalSeconds: number) {
  if (!reopenedAt) return undefined;
  const waitMs = reopenedAt.getTime() + intervalSeconds * 1000 - now.getTime();
  return waitMs <= 0 ? undefined : Math.max(1, Math.ceil(waitMs / 1000));
}

/** The slots of one partner in one mode: connection id -> when its slot was taken. */
export type Holds = Record<string, Date>;

/**
 * What the repair sets a partner's slots to: every connection holding one by its stored status, and
 * holds younger than `graceMs` (a request between its two writes). Undefined when already right.
 */
export function repairedHolds(
  current: Holds,
  holdingIds: readonly string[],
  now: Date,
  graceMs: number,
): Holds | undefined {
  const next: Holds = {};
  for (const id of holdingIds) next[id] = current[id] ?? now;
  for (const [id, at] of Object.entries(current))
    if (!(id in next) && at.getTime() > now.getTime() - graceMs) next[id] = at;
  const same =
    Object.keys(next).length === Object.keys(current).length && Object.keys(next).every((id) => id in current);
  return same ? undefined : next;
}

const DAY_MS = 86_400_000;

/** The UTC day whose counter an opening counts in (the per-day bound, slots.ts). */
export const dayKey = (at: Date): string => at.toISOString().slice(0, 10);

export function secondsUntilNextDay(now: Date): number {
  const next = Math.floor(now.getTime() / DAY_MS) * DAY_MS + DAY_MS;
  return Math.max(1, Math.ceil((next - now.getTime()) / 1000));
}

/** Counters of days before this one are deleted by the repair round (yesterday's is kept: a request that read the clock just before midnight may still write it). */
export const oldestKeptDay = (now: Date): string => dayKey(new Date(now.getTime() - DAY_MS));
