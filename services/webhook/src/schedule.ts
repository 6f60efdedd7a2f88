// When a webhook event is attempted again. The first attempt is immediate; retry n (n >= 1) waits
// base * 2^(n-1) seconds after the previous attempt ended, never more than a ceiling of an
// eighth of the window (3 h for 24 h), each delay with ±20 % jitter. Every attempt starts early
// enough to end within the window: the last one starts at the latest at
// `window - attempt timeout` after the event was created (or halfway through a window shorter
// than two timeouts), and after it the event is failed.

export interface RetryPolicy {
  baseSeconds: number;
  windowSeconds: number;
  attemptTimeoutSeconds: number;
}

export const JITTER = 0.2;

/** The longest wait between two attempts, before jitter. */
export function maxDelaySeconds(p: RetryPolicy): number {
  return Math.max(p.baseSeconds, p.windowSeconds / 8);
}

/** The latest moment, in ms after creation, at which an attempt may start. */
export function latestStartOffsetMs(p: RetryPolicy): number {
  return Math.max(p.windowSeconds - p.attemptTimeoutSeconds, p.windowSeconds / 2) * 1000;
}

/** The wait before retry `retry` (1 for the first retry), in ms; `random` in [0, 1). */
export function retryDelayMs(retry: number, p: RetryPolicy, random: number): number {
  const exp = Math.min(p.baseSeconds * 2 ** Math.min(retry - 1, 52), maxDelaySeconds(p));
  const jitter = 1 - JITTER + 2 * JITTER * random;
  return Math.round(exp * jitter * 1000);
}

/**
 * When the next attempt starts (Unix ms), or null when the window is used up and the event fails.
 * `attemptsMade` counts the attempt that just ended, which ended at `lastEndedAt`. `notBefore`
 * (Unix ms) is a receiver's Retry-After: the next attempt waits for it, and when it falls after the
 * last start the window allows, there is no next attempt.
 */
export function nextAttemptAt(
  ev: { createdAt: number; attemptsMade: number; lastEndedAt: number; notBefore?: number },
  p: RetryPolicy,
  random: number = Math.random(),
): number | null {
  const latestStart = ev.createdAt + latestStartOffsetMs(p);
  if (ev.lastEndedAt >= latestStart) return null;
  if (ev.notBefore !== undefined && ev.notBefore > latestStart) return null;
  const candidate = Math.max(ev.lastEndedAt + retryDelayMs(ev.attemptsMade, p, random), ev.notBefore ?? 0);
  return Math.min(candidate, latestStart);
}

/** Statuses whose Retry-After is honoured (RFC 9110 section 10.2.3: 503; RFC 6585: 429). */
export const RETRY_AFTER_STATUSES: ReadonlySet<number> = new Set([429, 503]);

/**
 * A Retry-After header (delay seconds or an HTTP date) as the Unix ms before which the next attempt
 * must not start; undefined when absent or unreadable.
 */
export function retryAfterUntil(header: string | undefined, receivedAt: number): number | undefined {
  const value = header?.trim();
  if (!value) return undefined;
  if (/^\d+$/.test(value)) return receivedAt + Number(value) * 1000;
  const date = Date.parse(value);
  // An HTTP date (RFC 9110 section 5.6.7) ends in GMT; other strings Date.parse would guess at are ignored.
  return Number.isNaN(date) || !/ GMT$/.test(value) ? undefined : Math.max(date, receivedAt);
}
