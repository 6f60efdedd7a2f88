import { createLocalJWKSet, errors, jwtVerify, type JSONWebKeySet, type JWTPayload } from "jose";
import { LRUCache } from "lru-cache";
import type { AuthClient } from "@pi/common/rpc/clients";
import type { PartnerMode } from "@pi/common/rules/mode";

export interface Principal {
  partnerId: string;
  clientId: string;
  mode: PartnerMode;
  scopes: ReadonlySet<string>;
}

// In or before the suspension's second (`iat` is whole seconds). A reinstatement happens in a later
// second (the auth service waits for it), so no token issued after it falls here.
export function issuedBeforeSuspension(iat: number, suspendedAtMs: number): boolean {
  return iat <= Math.floor(suspendedAtMs / 1000);
}

// A suspension is a revocation: once reinstated, the partner's tokens issued before its latest
// suspension stay refused (docs/authentication.md).
export class RevocationList {
  private readonly revokedClients = new Set<string>();
  private readonly suspendedPartners = new Set<string>();
  /** Partner id to its latest suspension, Unix ms. */
  private readonly suspendedAt = new Map<string, number>();
  private readonly revokedKids = new Set<string>();
  /** Called when a key is revoked (the verifier then refreshes its key set). */
  onKeyRevoked = () => {};

  revokeClient(clientId: string): void {
    this.revokedClients.add(clientId);
  }
  /** `suspendedAtMs`: the latest suspension as the event states it (0 when unknown). */
  setSuspended(partnerId: string, suspended: boolean, suspendedAtMs: number): void {
    if (suspended) this.suspendedPartners.add(partnerId);
    else this.suspendedPartners.delete(partnerId);
    this.noteSuspension(partnerId, suspendedAtMs);
  }
  noteSuspension(partnerId: string, suspendedAtMs: number): void {
    if (suspendedAtMs > (this.suspendedAt.get(partnerId) ?? 0)) this.suspendedAt.set(partnerId, suspendedAtMs);
  }
  revokeKey(kid: string): void {
    this.revokedKids.add(kid);
    this.onKeyRevoked();
  }
  keyRevoked(kid: string): boolean {
    return this.revokedKids.has(kid);
  }
  /** `token.iat` in whole seconds. */
  blocks(principal: Pick<Principal, "clientId" | "partnerId">, token: { kid: string; iat: number }): boolean {
    if (
      this.revokedClients.has(principal.clientId) ||
      this.suspendedPartners.has(principal.partnerId) ||
      this.revokedKids.has(token.kid)
    )
      return true;
    const suspendedAt = this.suspendedAt.get(principal.partnerId);
    return suspendedAt !== undefined && issuedBeforeSuspension(token.iat, suspendedAt);
  }
}

interface Verified {
  payload: JWTPayload;
  kid: string;
}

/** The least time between two JWKS refreshes caused by tokens with an unknown key id. */
const UNKNOWN_KID_REFRESH_MS = 5_000;

/** Verified tokens remembered under the current key set (a bound on memory). */
const VERIFIED_TOKENS_MAX = 4_096;

// A token that passed is remembered with its claims (they can never change under one key set);
// expiry and the revocation list are checked on every use.
export class BearerVerifier {
  private keySet?: ReturnType<typeof createLocalJWKSet>;
  private keysJson = "";
  private verified = new LRUCache<string, Verified>({ max: VERIFIED_TOKENS_MAX });
  private issuer = "";
  private audience = "";
  private lastRefresh = 0;
  private refreshing?: Promise<void>;

  constructor(
    private readonly auth: AuthClient,
    readonly revocations: RevocationList,
    private readonly now: () => number = Date.now,
  ) {
    // The key's tokens are refused by the list on every use; the key set is refreshed for its replacement.
    revocations.onKeyRevoked = () => {
      this.lastRefresh = 0;
      if (this.keySet) this.refreshKeys().catch(() => undefined); // the periodic refresh tries again
    };
  }

  get remembered(): number {
    return this.verified.size;
  }

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

  async verify(token: string): Promise<Principal | undefined> {
    try {
      if (!this.keySet) await this.refreshKeys();
      return this.principalOf(await this.verifyOnce(token));
    } catch (err) {
      if (!(err instanceof errors.JWKSNoMatchingKey) || Date.now() - this.lastRefresh < UNKNOWN_KID_REFRESH_MS)
        return undefined;
      try {
        await this.refreshKeys();
        return this.principalOf(await this.verifyOnce(token));
      } catch {
        return undefined;
      }
    }
  }

  private async verifyOnce(token: string): Promise<Verified> {
    const verified = this.verified; // a key set that changes meanwhile replaces it: nothing stale goes in
    const now = this.now();
    const known = verified.get(token);
    // jose's rule: expired once the whole second read reaches exp.
    if (known) {
      if (Math.floor(now / 1000) < known.payload.exp!) return known;
      verified.delete(token);
    }
    const { payload, protectedHeader } = await jwtVerify(token, this.keySet!, {
      issuer: this.issuer,
      audience: this.audience,
      algorithms: ["ES256"],
      typ: "at+jwt",
      requiredClaims: ["sub", "exp", "iat", "jti"],
      currentDate: new Date(now),
    });
    const result = { payload, kid: protectedHeader.kid ?? "" };
    // A key revoked while this token was being verified: not remembered (and refused below).
    if (!this.revocations.keyRevoked(result.kid)) verified.set(token, result);
    return result;
  }

  private principalOf({ payload, kid }: Verified): Principal | undefined {
    const { sub, client_id: clientId, mode, scope, iat } = payload;
    if (typeof sub !== "string" || typeof clientId !== "string" || typeof scope !== "string" || typeof iat !== "number")
      return undefined;
    if (mode !== "live" && mode !== "test") return undefined;
    const principal = { partnerId: sub, clientId, mode, scopes: new Set(scope.split(" ").filter(Boolean)) } as const;
    return this.revocations.blocks(principal, { kid, iat }) ? undefined : principal;
  }
}

// RFC 6750 section 2.1: the scheme is case-insensitive; the token is a b64token.
const bearerPattern = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;

export function bearerTokenOf(header: string | undefined): string | undefined {
  return header ? bearerPattern.exec(header)?.[1] : undefined;
}
