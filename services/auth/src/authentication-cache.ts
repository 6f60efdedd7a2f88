import { LRUCache } from "lru-cache";
import type { CredentialMode } from "./store.js";

// Successful client authentications, keyed by client id and the HMAC of the presented secret: only
// both right find an entry, so every failure takes the full path of guarantee 5. The cache is emptied
// by the replica that makes a change and by every replica its partner event reaches; a ticket taken
// before the reads keeps a read from before a change out of the cache after it.

export interface Authenticated {
  clientId: string;
  partnerId: string;
  mode: CredentialMode;
  scopes: readonly string[];
}

export const AUTHENTICATION_CACHE_MAX = 10_000;
export const AUTHENTICATION_CACHE_TTL_MS = 5 * 60_000;

export interface AuthenticationCacheOptions {
  max?: number;
  ttlMs?: number;
  /** PartnerEventFeed.trusted: while false, nothing is served or kept, and what was kept is dropped. */
  trusted?: () => boolean;
  perf?: { now(): number };
}

export class AuthenticationCache {
  private readonly entries: LRUCache<string, Authenticated>;
  private readonly trusted: () => boolean;
  private drops = 0;

  constructor(options: AuthenticationCacheOptions = {}) {
    this.entries = new LRUCache<string, Authenticated>({
      max: options.max ?? AUTHENTICATION_CACHE_MAX,
      ttl: options.ttlMs ?? AUTHENTICATION_CACHE_TTL_MS,
      ...(options.perf ? { perf: options.perf, ttlResolution: 0 } : {}),
    });
    this.trusted = options.trusted ?? (() => true);
  }

  get size(): number {
    return this.entries.size;
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
