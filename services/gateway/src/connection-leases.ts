import { LRUCache } from "lru-cache";

// The statuses this gateway may answer again without asking: each under a read lease the
// connection service granted (services/connection/src/read-lease.ts), which no change of that
// connection outlives. A lease counts from before the request that got it, on this process's
// monotonic clock, so it ends here before it ends at the service. Past half its length a lease is
// renewed in the background while polls are still answered under it, so a connection polled
// steadily never makes a poll wait for the service.

/** A read of the connection service asking for a lease: the status and the lease granted (0: none). */
export type LeasedRead = () => Promise<{ status: string; leaseMs: number }>;

interface Held {
  status: string;
  /** Clock readings: the lease's end, and from when it is renewed ahead. */
  until: number;
  renewAt: number;
  renewing: boolean;
}

export class ConnectionLeases {
  private readonly held: LRUCache<string, Held>;

  constructor(
    maxEntries = 50_000,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.held = new LRUCache({ max: maxEntries });
  }

  private static key(partnerId: string, mode: string, id: string): string {
    return `${partnerId}\u0000${mode}\u0000${id}`;
  }

  /** The connection's status: from a lease that has not ended, or else from `read`. */
  async status(partnerId: string, mode: string, id: string, read: LeasedRead): Promise<string> {
    const key = ConnectionLeases.key(partnerId, mode, id);
    const entry = this.held.get(key);
    const now = this.now();
    if (entry && now < entry.until) {
      if (now >= entry.renewAt && !entry.renewing) {
        entry.renewing = true;
        this.fetch(key, read).catch(() => {
          entry.renewing = false;
        });
      }
      return entry.status;
    }
    if (entry) this.held.delete(key);
    return this.fetch(key, read);
  }

  private async fetch(key: string, read: LeasedRead): Promise<string> {
    const askedAt = this.now();
    const { status, leaseMs } = await read();
    if (leaseMs > 0)
      this.held.set(key, { status, until: askedAt + leaseMs, renewAt: askedAt + leaseMs / 2, renewing: false });
    else this.held.delete(key);
    return status;
  }

  /** Forgets a connection (this gateway's own DELETE of it). */
  forget(partnerId: string, mode: string, id: string): void {
    this.held.delete(ConnectionLeases.key(partnerId, mode, id));
  }
}
