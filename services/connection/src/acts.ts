import type { InternalStatus } from "./state-machine.js";

// Caregiver acts are idempotent by their id (docs/connections.md, "Caregiver acts"), pure: the
// connection remembers the acts that changed it, so a retry changes nothing and answers what it did.

export interface AppliedAct {
  id: string;
  status: InternalStatus;
}

/** How many applied acts a connection remembers (the newest): retries last seconds. */
export const REMEMBERED_ACTS = 16;

/** The shape of an act id: what `newId("act")` draws, or another client's up to 64 characters of the same alphabet. */
export const ACT_ID = /^act_[0-9A-Za-z]{1,64}$/;

export function rememberAct(remembered: readonly AppliedAct[] | undefined, act: AppliedAct): AppliedAct[] {
  return [...(remembered ?? []), act].slice(-REMEMBERED_ACTS);
}
