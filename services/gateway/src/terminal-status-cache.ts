import { LRUCache } from "lru-cache";

// GET /v1/files/{id} for a file that can no longer change. A file leaves `received` once, for
// `processed` or `failed` (file-intake's worker ends its lease only from `received`), and no
// record is ever deleted, so a terminal status read once is the answer for good: the gateway keeps
// it and asks file-intake no more. The key holds the asking partner and mode as well as the id, so
// another partner's or mode's request never finds the entry: it goes to file-intake and gets the
// same 404 as an unknown id, exactly as before (no-oracle guarantee 3). Each gateway replica keeps
// its own; nothing needs invalidating.

export type TerminalStatus = "processed" | "failed";

export const TERMINAL_STATUS_CACHE_MAX = 10_000;

const isTerminal = (status: string): status is TerminalStatus => status === "processed" || status === "failed";

export class TerminalStatusCache {
  private readonly entries: LRUCache<string, TerminalStatus>;

  constructor(max = TERMINAL_STATUS_CACHE_MAX) {
    this.entries = new LRUCache<string, TerminalStatus>({ max });
  }

  get size(): number {
    return this.entries.size;
  }

  get(partnerId: string, mode: string, fileId: string): TerminalStatus | undefined {
    return this.entries.get(key(partnerId, mode, fileId));
  }

  /** Keeps the status the partner's own file was read with, if it is terminal; `received` is never kept. */
  remember(partnerId: string, mode: string, fileId: string, status: string): void {
    if (isTerminal(status)) this.entries.set(key(partnerId, mode, fileId), status);
  }
}

const key = (partnerId: string, mode: string, fileId: string) => JSON.stringify([partnerId, mode, fileId]);
