import { createLocalJWKSet, errors, jwtVerify, type JSONWebKeySet, type JWTPayload } from "jose";
import { LRUCache } from "lru-cache";
import type { AuthClient } from "@pi/common";

export interface Principal {
  partnerId: string;
  clientId: string;
  mode: "live" | "test";
  scopes: ReadonlySet<string>;
}

/** Revoked credentials and suspended partners, as learnt from the auth service and Kafka. */
export class RevocationList {
  private readonly revokedClients = new Set<string>();
  private readonly suspendedPartners = new Set<string>();

  revokeClient(clientId: string): void {
    this.revokedClients.add(clientId);
  }
  suspendPartner(partnerId: string): void {
    this.suspendedPartners.add(partnerId);
  }
  reinstatePartner(partnerId: string): void {
    this.suspendedPartners.delete(partnerId);
  }
  blocks(principal: Pick<Principal, "clientId" | "partnerId">): boolean {
    return this.revokedClients.has(principal.clientId) || this.suspendedPartners.has(principal.partnerId);
  }
}

/** The least time between two JWKS refreshes caused by tokens with an unknown key id. */
const UNKNOWN_KID_REFRESH_MS = 5_000;

/** Tokens whose signature and claims were checked against the current key set (a bound on memory). */
const VERIFIED_TOKENS_MAX = 4_096;

/**
 * Verifies bearer tokens locally against the auth service's public keys (no call per request).
 * The key set is refreshed periodically (service.ts) and when a token names an unknown key id,
 * at most every few seconds, so a flood of forged key ids cannot turn into a flood of calls.
 *
 * A token that passed is remembered with its claims (the ES256 verification is most of a request's
 * work): later uses check only its expiry, and the revocation list on every use. A key set that
 * changes forgets them all, so a token under a retired key is refused from the next refresh on.
 */
export class BearerVerifier {
  private keySet?: ReturnType<typeof createLocalJWKSet>;
  private keysJson = "";
  private verified = new LRUCache<string, JWTPayload>({ max: VERIFIED_TOKENS_MAX });
  private issuer = "";
  private audience = "";
  private lastRefresh = 0;
  private refreshing?: Promise<void>;

  constructor(
    private readonly auth: AuthClient,
    readonly revocations: RevocationList,
    private readonly now: () => number = Date.now,
  ) {}

  /** Fetches the key set; concurrent callers share one call. */
  refreshKeys(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const res = await this.auth.getJwks({});
        if (res.jwksJson !== this.keysJson || res.issuer !== this.issuer || res.audience !== this.audience) {
          this.keySet = createLocalJWKSet(JSON.parse(res.jwksJson) as JSONWebKeySet);
          this.keysJson = res.jwksJson;
          this.verified = new LRUCache({ max: VERIFIED_TOKENS_MAX });
        }
        this.issuer = res.issuer;
        this.audience = res.audience;
        this.lastRefresh = Date.now();
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  /** The principal of a valid, unrevoked token; undefined for anything else. */
  async verify(token: string): Promise<Principal | undefined> {
    try {
      if (!this.keySet) await this.refreshKeys();
      return this.principalOf(await this.verifyOnce(token));
    } catch (err) {
      if (!(err instanceof errors.JWKSNoMatchingKey) || Date.now() - this.lastRefresh < UNKNOWN_KID_REFRESH_MS) return undefined;
      try {
        await this.refreshKeys();
        return this.principalOf(await this.verifyOnce(token));
      } catch {
        return undefined;
      }
    }
  }

  /** The claims of a valid token; throws (jose's errors) for anything else. */
  private async verifyOnce(token: string): Promise<JWTPayload> {
    const verified = this.verified; // a key set that changes meanwhile replaces it: nothing stale goes in
    const now = this.now();
    const known = verified.get(token);
    // jose's rule: expired once the whole second read reaches exp.
    if (known) {
      if (Math.floor(now / 1000) < known.exp!) return known;
      verified.delete(token);
    }
    const { payload } = await jwtVerify(token, this.keySet!, {
      issuer: this.issuer,
      audience: this.audience,
      algorithms: ["ES256"],
      typ: "at+jwt",
      requiredClaims: ["sub", "exp", "iat", "jti"],
      currentDate: new Date(now),
    });
    verified.set(token, payload);
    return payload;
  }

  private principalOf(payload: JWTPayload): Principal | undefined {
    const { sub, client_id: clientId, mode, scope } = payload;
    if (typeof sub !== "string" || typeof clientId !== "string" || typeof scope !== "string") return undefined;
    if (mode !== "live" && mode !== "test") return undefined;
    const principal = { partnerId: sub, clientId, mode, scopes: new Set(scope.split(" ").filter(Boolean)) } as const;
    return this.revocations.blocks(principal) ? undefined : principal;
  }
}

// RFC 6750 section 2.1: the scheme is case-insensitive; the token is a b64token.
const bearerPattern = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

export function bearerTokenOf(header: string | undefined): string | undefined {
  return header ? bearerPattern.exec(header)?.[1] : undefined;
}
