import { nextAttemptAt, RETRY_AFTER_STATUSES, retryAfterUntil, type RetryPolicy } from "./schedule.js";

// The delivery state machine of one webhook event: its callers only store its answers.
//
//   (stored) ──► pending ──attempt 2xx──────────────► delivered
//                 │  ▲ └─attempt failed, window left──┘ (stays pending, due later)
//                 │  │   attempt failed, window used up ──► failed
//                 │  └──── resend (any state), recover (failed, no_endpoint) ◄──┘
//                 └─no address when first due──► no_endpoint
//
// pending is the only state with a queue entry; every other state waits for the operator.

export type DeliveryState = "pending" | "delivered" | "failed" | "no_endpoint";

export interface DeliveryStep {
  state: DeliveryState;
  nextAttemptAt: Date | null;
  deliveredAt?: Date;
}

export type AttemptOutcome = "delivered" | "retry" | "failed";

export function stored(now: Date): DeliveryStep & { state: "pending"; attempts: 0; attemptLog: [] } {
  return { state: "pending", attempts: 0, attemptLog: [], nextAttemptAt: now };
}

/** No webhook address when due: kept unsent before any attempt; after attempts, null (a failed attempt). */
export function noEndpoint(attemptsMade: number): DeliveryStep | null {
  return attemptsMade === 0 ? { state: "no_endpoint", nextAttemptAt: null } : null;
}

export interface Attempt {
  delivered: boolean;
  statusCode: number;
  retryAfter?: string;
  /** When the retry window started: the event's creation, or the operator's last re-queue. */
  windowStart: Date;
  attemptsMade: number;
  endedAt: Date;
  /** The replica was stopping and cut the attempt off (no answer came): it does not count. */
  cutOff: boolean;
}

export type AfterAttempt =
  | { counted: false; dueAt: Date }
  | (DeliveryStep & { counted: true; outcome: AttemptOutcome });

export function afterAttempt(a: Attempt, policy: RetryPolicy, random: number = Math.random()): AfterAttempt {
  if (a.cutOff && !a.delivered && a.statusCode === 0) return { counted: false, dueAt: a.endedAt };
  if (a.delivered)
    return { counted: true, outcome: "delivered", state: "delivered", nextAttemptAt: null, deliveredAt: a.endedAt };
  const endedAt = a.endedAt.getTime();
  const notBefore = RETRY_AFTER_STATUSES.has(a.statusCode) ? retryAfterUntil(a.retryAfter, endedAt) : undefined;
  const due = nextAttemptAt(
    { createdAt: a.windowStart.getTime(), attemptsMade: a.attemptsMade, lastEndedAt: endedAt, notBefore },
    policy,
    random,
  );
  return due === null
    ? { counted: true, outcome: "failed", state: "failed", nextAttemptAt: null }
    : { counted: true, outcome: "retry", state: "pending", nextAttemptAt: new Date(due) };
}

export function requeue(now: Date): DeliveryStep & { state: "pending" } {
  return { state: "pending", nextAttemptAt: now };
}

export function failedAt(event: { attemptLog: readonly { startedAt: Date }[]; createdAt: Date }): Date {
  return event.attemptLog.at(-1)?.startedAt ?? event.createdAt;
}

/** The events a recover since `since` re-queues: failed (or never sendable) since then. */
export function recoverable<
  E extends { state: DeliveryState; attemptLog: readonly { startedAt: Date }[]; createdAt: Date },
>(events: E[], since: Date): E[] {
  return events.filter(
    (e) => (e.state === "failed" || e.state === "no_endpoint") && failedAt(e).getTime() >= since.getTime(),
  );
}
