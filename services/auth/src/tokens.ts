import { SignJWT } from "jose";
import { newId } from "@pi/common";
import { JWT_ALG, type SigningKeys } from "./keys.js";
import type { CredentialMode } from "./store.js";

export const TOKEN_ISSUER = "pi-auth";
export const TOKEN_AUDIENCE = "partner-api";

/** The claims of an access token; the gateway reads partner, credential, mode and scopes from them. */
export interface AccessClaims {
  sub: string; // partner id
  client_id: string;
  mode: CredentialMode;
  scope: string;
}

export async function signAccessToken(keys: SigningKeys, claims: AccessClaims, ttlSeconds: number): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ client_id: claims.client_id, mode: claims.mode, scope: claims.scope })
    .setProtectedHeader({ alg: JWT_ALG, kid: keys.kid, typ: "at+jwt" })
    .setSubject(claims.sub)
    .setIssuer(TOKEN_ISSUER)
    .setAudience(TOKEN_AUDIENCE)
    .setJti(newId("req"))
    .setIssuedAt(now)
    .setExpirationTime(now + ttlSeconds)
    .sign(keys.privateKey);
}
