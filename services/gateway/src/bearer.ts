import { createLocalJWKSet, errors, jwtVerify, type JSONWebKeySet } from "jose";
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

/**
 * Verifies bearer tokens locally against the auth service's public keys (no call per request).
 * An unknown key id triggers one refresh of the key set, at most every few seconds.
 */
export class BearerVerifier {
  private keySet?: ReturnType<typeof createLocalJWKSet>;
  private issuer = "";
  private audience = "";
  private lastRefresh = 0;

  constructor(
    private readonly auth: AuthClient,
    readonly revocations: RevocationList,
  ) {}

  async refreshKeys(): Promise<void> {
    const res = await this.auth.getJwks({});
    this.keySet = createLocalJWKSet(JSON.parse(res.jwksJson) as JSONWebKeySet);
    this.issuer = res.issuer;
    this.audience = res.audience;
    this.lastRefresh = Date.now();
  }

  /** The principal of a valid, live token; undefined for anything else. */
  async verify(token: string): Promise<Principal | undefined> {
    if (!this.keySet) await this.refreshKeys();
    try {
      return this.principalOf(await this.verifyOnce(token));
    } catch (err) {
      if (err instanceof errors.JWKSNoMatchingKey && Date.now() - this.lastRefresh > 5000) {
        await this.refreshKeys();
        try {
          return this.principalOf(await this.verifyOnce(token));
        } catch {
          return undefined;
        }
      }
      return undefined;
    }
  }

  private verifyOnce(token: string) {
    return jwtVerify(token, this.keySet!, { issuer: this.issuer, audience: this.audience, algorithms: ["ES256"], typ: "at+jwt" });
  }

  private principalOf({ payload }: Awaited<ReturnType<BearerVerifier["verifyOnce"]>>): Principal | undefined {
    const { sub, client_id: clientId, mode, scope } = payload;
    if (typeof sub !== "string" || typeof clientId !== "string" || typeof scope !== "string") return undefined;
    if (mode !== "live" && mode !== "test") return undefined;
    const principal = { partnerId: sub, clientId, mode, scopes: new Set(scope.split(" ").filter(Boolean)) } as const;
    return this.revocations.blocks(principal) ? undefined : principal;
  }
}

const bearerPattern = /^Bearer ([A-Za-z0-9\-._~+/]+=*)$/;

export function bearerTokenOf(header: string | undefined): string | undefined {
  return header ? bearerPattern.exec(header)?.[1] : undefined;
}
