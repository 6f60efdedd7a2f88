import { LRUCache } from "lru-cache";

// The statuses this gateway may answer again without asking: each under a read lease the
// connection service granted (services/connection/src/read-lease.ts), which no change of that
// connection outlives. A lease counts from before the request that got it, on this process's
// monotonic clock, so it ends here before it ends at the service.

export interface LeasedStatus {
  status: string;
  /** performance.now() at which the lease ends. */
  until: number;
}

export class ConnectionLeases {
  private readonly held: LRUCache<string, LeasedStatus>;

  constructor(
    maxEntries = 50_000,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.held = new LRUCache({ max: maxEntries });
  }

  private static key(partnerId: string, mode: string, id: string): string {
    return `${partnerId}\u0000${mode}\u0000${id}`;
  }

  /** The status held under a lease that has not ended, if any. */
  get(partnerId: string, mode: string, id: string): string | undefined {
    const key = ConnectionLeases.key(partnerId, mode, id);
    const entry = this.held.get(key);
    if (!entry) return undefined;
    if (this.now() < entry.until) return entry.status;
    this.held.delete(key);
    return undefined;
  }

  /** The clock reading to take before asking for a lease. */
  start(): number {
    return this.now();
  }

  /** Holds `status` for `leaseMs` counted from `askedAt` (start(), before the request was sent). */
  hold(partnerId: string, mode: string, id: string, status: string, askedAt: number, leaseMs: number): void {
    if (leaseMs <= 0) return;
    this.held.set(ConnectionLeases.key(partnerId, mode, id), { status, until: askedAt + leaseMs });
  }

  /** Forgets a connection (this gateway's own DELETE of it). */
  forget(partnerId: string, mode: string, id: string): void {
    this.held.delete(ConnectionLeases.key(partnerId, mode, id));
  }
}
