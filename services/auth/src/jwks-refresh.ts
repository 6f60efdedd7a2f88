// When a private_key_jwt credential's JWK Set URL is fetched in the background (assertion-keys.ts), pure.

export const JWKS_URL_MAX_AGE_MS = 10 * 60_000;
/** The least time between two fetches of one URL, for an unknown kid and after a failure (forged kids cannot make auth hammer a partner's host). */
export const JWKS_URL_REFETCH_COOLDOWN_MS = 30_000;
export const JWKS_URL_REFRESH_EVERY_MS = 60_000;

export interface FetchHistory {
  fetchedAt?: Date;
  /** The latest failed fetch (absent or older than fetchedAt: none since the set was fetched). */
  failedAt?: Date;
  attemptedAt?: Date;
}

export interface RefreshTimes {
  maxAgeMs: number;
  cooldownMs: number;
}

const since = (at: Date | undefined, now: Date) => (at ? now.getTime() - at.getTime() : Number.POSITIVE_INFINITY);

/** For an unknown kid: nothing was tried within the cooldown, no fetch, failed or not, by this replica or (stored) any other. */
export const unknownKidFetchDue = (h: FetchHistory, now: Date, t: RefreshTimes) =>
  Math.min(since(h.fetchedAt, now), since(h.failedAt, now), since(h.attemptedAt, now)) >= t.cooldownMs;

/** The scheduled round: no set yet, or one older than the max age; never sooner than the cooldown after any attempt. */
export function scheduledFetchDue(h: FetchHistory, now: Date, t: RefreshTimes): boolean {
  return since(h.fetchedAt, now) >= t.maxAgeMs && unknownKidFetchDue(h, now, t);
}
