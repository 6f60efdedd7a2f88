import { LRUCache } from "lru-cache";

// GET /v1/files/{id} of a file that can never change again: `processed` and `failed` are final and no
// record is deleted, so nothing needs invalidating. The key holds the asking partner and mode, so
// another's request goes to file-intake and gets its 404 (guarantee 3).

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
