import { decodeJwt, decodeProtectedHeader } from "jose";

// The rules of a private_key_jwt client assertion (RFC 7523 section 3, SMART Backend Services), pure,
// apart from the signature and the jti's first use. Every failure is the one invalid_client.

export const CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/** SMART's required pair (RS384, ES384) and the two most clients default to. */
export const ASSERTION_ALGORITHMS = ["RS384", "ES384", "ES256", "RS256"] as const;
export type AssertionAlgorithm = (typeof ASSERTION_ALGORITHMS)[number];

/** SMART: `exp` no more than five minutes in the future. */
export const MAX_ASSERTION_LIFETIME_SECONDS = 300;
/** How far ahead of ours a client's clock may run (its `exp` = its now + 300 s) before the five minutes are exceeded. */
export const ASSERTION_CLOCK_SKEW_SECONDS = 10;
export const MAX_ASSERTION_ID_LENGTH = 256;

export const isAssertionAlgorithm = (alg: unknown): alg is AssertionAlgorithm =>
  (ASSERTION_ALGORITHMS as readonly unknown[]).includes(alg);

export interface ClaimedAssertion {
  alg: AssertionAlgorithm;
  kid: string;
  /** `iss`, which must equal `sub`; only a claim until the signature is verified. */
  clientId: string;
}

export function claimedAssertion(assertion: string): ClaimedAssertion | undefined {
  try {
    const header = decodeProtectedHeader(assertion);
    const claims = decodeJwt(assertion);
    if (!isAssertionAlgorithm(header.alg) || typeof header.kid !== "string" || header.kid === "") return undefined;
    if (header.crit !== undefined) return undefined;
    if (typeof claims.iss !== "string" || claims.iss === "" || claims.iss.length > MAX_ASSERTION_ID_LENGTH)
      return undefined;
    return { alg: header.alg, kid: header.kid, clientId: claims.iss };
  } catch {
    return undefined;
  }
}

export type ClaimsCheck = { ok: true; accepted: { jti: string; exp: number } } | { ok: false; reason: string };

/** The claims rules of RFC 7523 and SMART (`now` in Unix seconds); the reason goes to the logs only. */
export function checkAssertionClaims(
  claims: Record<string, unknown>,
  expect: { clientId: string; audience: string; now: number },
): ClaimsCheck {
  const fail = (reason: string): ClaimsCheck => ({ ok: false, reason });
  if (claims.iss !== expect.clientId) return fail("iss is not the client id");
  if (claims.sub !== expect.clientId) return fail("sub is not the client id");
  const aud = claims.aud;
  const audiences = typeof aud === "string" ? [aud] : Array.isArray(aud) ? aud : [];
  if (!audiences.includes(expect.audience)) return fail("aud is not the token endpoint");
  const { exp, nbf, iat, jti } = claims;
  if (typeof exp !== "number" || !Number.isFinite(exp)) return fail("no exp");
  if (exp <= expect.now) return fail("expired");
  if (exp > expect.now + MAX_ASSERTION_LIFETIME_SECONDS + ASSERTION_CLOCK_SKEW_SECONDS)
    return fail("exp more than five minutes ahead");
  if (nbf !== undefined && (typeof nbf !== "number" || nbf > expect.now + ASSERTION_CLOCK_SKEW_SECONDS))
    return fail("not yet valid (nbf)");
  if (iat !== undefined && (typeof iat !== "number" || iat > expect.now + ASSERTION_CLOCK_SKEW_SECONDS))
    return fail("issued in the future (iat)");
  if (typeof jti !== "string" || jti === "" || jti.length > MAX_ASSERTION_ID_LENGTH) return fail("no usable jti");
  return { ok: true, accepted: { jti, exp: Math.ceil(exp) } };
}

/** The key under which a used jti is stored: per client, so one client's ids never collide with another's. */
export const usedJtiKey = (clientId: string, jti: string) => `${clientId}\u0000${jti}`;
