// Whose file extraction takes next: one partner after another, so one partner's backlog never holds
// up another's file. A partner's turn is when its last file was taken (`extraction_turns`).

/** A partner with files waiting: its oldest one. */
export interface WaitingHead {
  partnerId: string;
  fileId: string;
  oldest: Date;
}

/** The partner whose last file was taken longest ago, then the oldest file, then the id: every replica agrees. */
export function nextTurn(heads: readonly WaitingHead[], lastTaken: ReadonlyMap<string, Date>): WaitingHead | undefined {
  const turn = (h: WaitingHead) => lastTaken.get(h.partnerId)?.getTime() ?? Number.MIN_SAFE_INTEGER;
  const order = (a: WaitingHead, b: WaitingHead) =>
    turn(a) - turn(b) || a.oldest.getTime() - b.oldest.getTime() || (a.partnerId < b.partnerId ? -1 : 1);
  return [...heads].sort(order)[0];
}
