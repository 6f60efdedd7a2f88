// Which failures are worth the same request again, and how long to wait before it.

export interface RetryOptions {
  /** Attempts in all, the first included (default 5). */
  maxAttempts?: number;
  /** The first backoff, doubled each time, with ±20 % jitter (default 500 ms). */
  baseDelayMs?: number;
  /** No single wait is longer (default 30 s). */
  maxDelayMs?: number;
}

/** 429 and 503 are retried (after Retry-After when given); any other answer is final. */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([429, 503]);

export function retryAfterSeconds(header: string | null): number | undefined {
  if (!header || !/^\d+$/.test(header.trim())) return undefined;
  return Number(header.trim());
}

/** The wait before retry `n` (1 for the first): Retry-After when the server said, else backoff. */
export function retryDelayMs(n: number, options: RetryOptions, retryAfter?: number, random = Math.random()): number {
  const max = options.maxDelayMs ?? 30_000;
  if (retryAfter !== undefined) return Math.min(retryAfter * 1000, max);
  const backoff = (options.baseDelayMs ?? 500) * 2 ** (n - 1);
  return Math.min(backoff * (0.8 + 0.4 * random), max);
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
