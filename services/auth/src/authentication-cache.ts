import { LRUCache } from "lru-cache";
import type { PartnerMode } from "@pi/common/rules/mode";

// Successful client authentications, keyed by client id and the HMAC of the presented secret: only
// both right find an entry, so every failure takes the full path of guarantee 5. The cache is emptied
// by the replica that makes a change and by every replica its partner event reaches; a ticket taken
// before the reads keeps a read from before a change out of the cache after it.

export interface Authenticated {
  clientId: string;
  partnerId: string;
  mode: PartnerMode;
  scopes: readonly string[];
}

export class AuthenticationCache {
  private readonly entries: LRUCache<string, Authenticated>;
  private drops = 0;

  constructor(
    /** PartnerEventFeed.trusted: while false, nothing is served or kept, and what was kept is dropped. */
    private readonly trusted: () => boolean = () => true,
    /** lru-cache's own options, over 10,000 entries of 5 minutes at most (the TTL only a safety net). */
    options: Partial<LRUCache.Options<string, Authenticated, unknown>> = {},
  ) {
    this.entries = new LRUCache<string, Authenticated>({ max: 10_000, ttl: 5 * 60_000, ...options });
  }

  get(clientId: string, secretHash: string): Authenticated | undefined {
    if (!this.trusted()) {
      if (this.entries.size > 0) this.clear();
      return undefined;
    }
    return this.entries.get(key(clientId, secretHash));
  }

  ticket(): number {
    return this.drops;
  }

  /** Keeps a successful authentication unless something was dropped since `ticket`; true when kept. */
  keep(ticket: number, secretHash: string, authenticated: Authenticated): boolean {
    if (ticket !== this.drops || !this.trusted()) return false;
    this.entries.set(key(authenticated.clientId, secretHash), authenticated);
    return true;
  }

  /** Any partner event, or a change made here: every entry goes (changes are rare operator commands). */
  clear(): void {
    this.drops++;
    this.entries.clear();
  }
}

// The hash (64 hex characters) follows the last colon, so no client id, however odd, makes two keys meet.
const key = (clientId: string, secretHash: string) => `${clientId}:${secretHash}`;
