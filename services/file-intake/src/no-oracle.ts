// No-oracle guarantee 2 in time: how long the connection service takes to say no may depend on why, so a
// "no" is held until CONNECTION_REFUSAL_MS after the check started (it runs while the last bytes are stored).

export const CONNECTION_REFUSAL_MS = 250;

/** Until the next multiple of CONNECTION_REFUSAL_MS: a check slowed past it reveals only that coarse step. */
export function refusalDelay(elapsedMs: number): number {
  const steps = Math.max(1, Math.ceil(elapsedMs / CONNECTION_REFUSAL_MS));
  return steps * CONNECTION_REFUSAL_MS - elapsedMs;
}
