import { SignJWT } from "jose";
import { newId } from "@pi/common/rules/ids";
import { JWT_ALG, type KeyRing } from "./keys.js";
import type { Authenticated } from "./authentication-cache.js";

export const TOKEN_ISSUER = "pi-auth";
export const TOKEN_AUDIENCE = "partner-api";
export const TOKEN_TYPE = "at+jwt";

/** `iat` and `exp` of a token minted at `nowMs`: `exp` rounds up, so it lives at least its `expires_in`. */
export function tokenTimes(nowMs: number, ttlSeconds: number): { iat: number; exp: number } {
  return { iat: Math.floor(nowMs / 1000), exp: Math.ceil(nowMs / 1000) + ttlSeconds };
}

/** A reinstatement's wait into a later second than the suspension's, whose tokens stay refused. */
export function reinstatementWaitMs(suspendedAtMs: number | undefined, nowMs: number): number {
  if (suspendedAtMs === undefined) return 0;
  const nextSecond = (Math.floor(suspendedAtMs / 1000) + 1) * 1000;
  return Math.max(0, nextSecond - nowMs);
}

export async function signAccessToken(keys: KeyRing, who: Authenticated, scope: string, ttlSeconds: number) {
  const { iat, exp } = tokenTimes(Date.now(), ttlSeconds);
  const { kid, privateKey } = keys.signer();
  return new SignJWT({ client_id: who.clientId, mode: who.mode, scope })
    .setProtectedHeader({ alg: JWT_ALG, kid, typ: TOKEN_TYPE })
    .setSubject(who.partnerId)
    .setIssuer(TOKEN_ISSUER)
    .setAudience(TOKEN_AUDIENCE)
    .setJti(newId("tok"))
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .sign(privateKey);
}
