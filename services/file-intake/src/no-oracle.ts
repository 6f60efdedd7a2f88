// No-oracle guarantee 2 in time. Everything before the connection check is the same whatever the
// reason a send is refused, and the gateway gives every refusal the same body and headers; what is
// left is how long the connection service takes to say no, which may depend on why (a found
// document and a missing one, or an approved and a pending connection, need not cost the same). A "no" is therefore held
// until CONNECTION_REFUSAL_MS after the check started: below that, every refusal takes the same
// time. The check runs while the last bytes are being stored, so the hold costs nothing then.

export const CONNECTION_REFUSAL_MS = 250;

/**
 * How long to hold a "no" that took `elapsedMs`: until the next multiple of CONNECTION_REFUSAL_MS,
 * so that a check slowed past it reveals its duration only to that coarse step.
 */
export function refusalDelay(elapsedMs: number): number {
  const steps = Math.max(1, Math.ceil(elapsedMs / CONNECTION_REFUSAL_MS));
  return steps * CONNECTION_REFUSAL_MS - elapsedMs;
}
