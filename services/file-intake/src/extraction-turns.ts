// Whose file extraction takes next (pure; extraction-records.ts reads and writes what it needs).
// Extraction is shared by every partner, so files are taken one partner after another (round
// robin), not in the order they arrived: a partner with a backlog of a thousand files has its next
// one taken after every other waiting partner's next one, and another partner's file waits for at
// most the files already being extracted (one per extraction process). Each partner's turn is the
// time its last file was taken (`extraction_turns`, in the database, so every replica and every
// restart shares it); within a partner, its oldest file first.

/** A partner with files waiting: its oldest one. */
export interface WaitingHead {
  partnerId: string;
  fileId: string;
  oldest: Date;
}

/**
 * The partner whose file is taken next: the one whose last file was taken longest ago (never:
 * first), ties broken by the oldest waiting file, then by partner id (a total order, so every
 * replica agrees).
 */
export function nextTurn(heads: readonly WaitingHead[], lastTaken: ReadonlyMap<string, Date>): WaitingHead | undefined {
  const turn = (h: WaitingHead) => lastTaken.get(h.partnerId)?.getTime() ?? Number.MIN_SAFE_INTEGER;
  const before = (a: WaitingHead, b: WaitingHead) =>
    turn(a) !== turn(b)
      ? turn(a) < turn(b)
      : a.oldest.getTime() !== b.oldest.getTime()
        ? a.oldest < b.oldest
        : a.partnerId < b.partnerId;
  let best: WaitingHead | undefined;
  for (const head of heads) if (!best || before(head, best)) best = head;
  return best;
}
