// When a webhook event is attempted again (docs/webhooks.md, "Delivery and retries").

export interface RetryPolicy {
  baseSeconds: number;
  windowSeconds: number;
  attemptTimeoutSeconds: number;
}

export const JITTER = 0.2;

export function maxDelaySeconds(p: RetryPolicy): number {
  return Math.max(p.baseSeconds, p.windowSeconds / 8);
}

export function latestStartOffsetMs(p: RetryPolicy): number {
  return Math.max(p.windowSeconds - p.attemptTimeoutSeconds, p.windowSeconds / 2) * 1000;
}

/** The wait before retry `retry` (1 for the first retry), in ms; `random` in [0, 1). */
export function retryDelayMs(retry: number, p: RetryPolicy, random: number): number {
  const exp = Math.min(p.baseSeconds * 2 ** Math.min(retry - 1, 52), maxDelaySeconds(p));
  const jitter = 1 - JITTER + 2 * JITTER * random;
  return Math.round(exp * jitter * 1000);
}

/** When the next attempt starts (Unix ms), or null when the window is used up; `notBefore`: a Retry-After. */
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

export function retryAfterUntil(header: string | undefined, receivedAt: number): number | undefined {
  const value = header?.trim();
  if (!value) return undefined;
  if (/^\d+$/.test(value)) return receivedAt + Number(value) * 1000;
  const date = Date.parse(value);
  // An HTTP date (RFC 9110 section 5.6.7) ends in GMT; other strings Date.parse would guess at are ignored.
  return Number.isNaN(date) || !/ GMT$/.test(value) ? undefined : Math.max(date, receivedAt);
}
