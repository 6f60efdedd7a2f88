import pRetry from "p-retry";
import type { Logger } from "../runtime/logger.js";

export interface RetryOptions {
  /** How many times to try in all; Infinity: until it succeeds or `signal` aborts. */
  attempts: number;
  /** The wait after the first failure; each later wait is `factor` times the one before, up to `maxDelayMs`. */
  firstDelayMs: number;
  /** 2 by default; 1 waits `firstDelayMs` every time. */
  factor?: number;
  maxDelayMs?: number;
  retryIf?: (err: Error) => boolean;
  /** Logs each failure that will be tried again, with `what` and the wait. */
  logger?: Pick<Logger, "warn">;
}

export function retryDelay(failures: number, o: Pick<RetryOptions, "firstDelayMs" | "factor" | "maxDelayMs">): number {
  return Math.min(o.firstDelayMs * (o.factor ?? 2) ** (failures - 1), o.maxDelayMs ?? Infinity);
}

/** Runs `attempt` with backoff (p-retry, which never retries a TypeError that is not a network failure). */
export function retry<T>(what: string, attempt: (n: number) => Promise<T>, o: RetryOptions): Promise<T> {
  const retryIf = o.retryIf ?? (() => true);
  return pRetry(attempt, {
    retries: o.attempts - 1,
    minTimeout: o.firstDelayMs,
    factor: o.factor ?? 2,
    maxTimeout: o.maxDelayMs ?? Infinity,
    randomize: false,
    shouldRetry: ({ error }) => retryIf(error),
    onFailedAttempt: ({ error, attemptNumber, retriesLeft }) => {
      if (retriesLeft > 0 && retryIf(error))
        o.logger?.warn(
          { err: error.message, attempt: attemptNumber, retryInMs: retryDelay(attemptNumber, o) },
          `${what} failed; retrying`,
        );
    },
  });
}
