// Whether a partner's endpoint is failing (every attempt failed for the failing period), stored per partner.

export interface EndpointHealthDoc {
  _id: string; // partner id
  /** The first failed attempt since the last delivered one; null when the last attempt delivered. */
  failingSince: Date | null;
  lastSuccessAt: Date | null;
  lastFailureAt: Date | null;
  /** When the "failing" alert line was logged for the current streak; null when not (yet). */
  alertedAt: Date | null;
}

/** The failing period: a twenty-fourth of the retry window (1 h with the default 24 h window). */
export function failingAfterMs(windowSeconds: number): number {
  return (windowSeconds * 1000) / 24;
}

export function isFailing(
  doc: Pick<EndpointHealthDoc, "failingSince"> | null | undefined,
  now: number,
  failingAfter: number,
): boolean {
  return !!doc?.failingSince && now - doc.failingSince.getTime() >= failingAfter;
}

export type HealthTransition = "failing" | "recovered" | undefined;

export function afterAttempt(
  prev: EndpointHealthDoc | null,
  partnerId: string,
  delivered: boolean,
  at: Date,
  failingAfter: number,
): { next: EndpointHealthDoc; transition: HealthTransition } {
  const base: EndpointHealthDoc = prev ?? {
    _id: partnerId,
    failingSince: null,
    lastSuccessAt: null,
    lastFailureAt: null,
    alertedAt: null,
  };
  if (delivered) {
    const next = { ...base, failingSince: null, lastSuccessAt: at, alertedAt: null };
    return { next, transition: base.alertedAt ? "recovered" : undefined };
  }
  const next = { ...base, failingSince: base.failingSince ?? at, lastFailureAt: at };
  if (!base.alertedAt && isFailing(next, at.getTime(), failingAfter))
    return { next: { ...next, alertedAt: at }, transition: "failing" };
  return { next, transition: undefined };
}
