import { randomUUID } from "node:crypto";
import { exportJWK, generateKeyPair, SignJWT, importJWK, type JWK, type JWTPayload } from "jose";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common/store/mongo";
import { LocalKeyWrapper } from "@pi/common/store/data-keys";
import type { Settings } from "@pi/common/runtime/settings";
import { SecretSealer } from "@pi/auth";

// Helpers for the authentication tests: the auth service's own database and signing key, read the
// way only a test may (a partner never can), to build tokens that differ from a real one in
// exactly one respect.

export async function withAuthDb<T>(
  settings: Settings,
  use: (db: ReturnType<MongoClient["db"]>) => Promise<T>,
): Promise<T> {
  const client = await MongoClient.connect(settings.MONGODB_URI);
  try {
    return await use(client.db(databaseName(settings.DATA_NAMESPACE, "auth")));
  } finally {
    await client.close();
  }
}

interface StoredKey {
  kid: string;
  sealedPrivateJwk: string;
  activatesAt: Date;
}

/** The auth service's current signing key (the one activated most recently). */
export async function signingKey(settings: Settings): Promise<{ kid: string; key: CryptoKey }> {
  const keys = await withAuthDb(settings, (db) => db.collection<StoredKey>("signing_keys").find().toArray());
  const stored = keys
    .filter((k) => k.activatesAt.getTime() <= Date.now())
    .sort((a, b) => b.activatesAt.getTime() - a.activatesAt.getTime())[0]!;
  const sealer = new SecretSealer(LocalKeyWrapper.fromSetting(settings.DATA_KEYS!));
  const jwk = JSON.parse(await sealer.unseal(stored.sealedPrivateJwk, "token-signing-key")) as JWK;
  return { kid: stored.kid, key: (await importJWK(jwk, "ES256")) as CryptoKey };
}

export function decodeJwt(token: string): { header: Record<string, unknown>; payload: Record<string, unknown> } {
  const [h, p] = token.split(".");
  return {
    header: JSON.parse(Buffer.from(h!, "base64url").toString()) as Record<string, unknown>,
    payload: JSON.parse(Buffer.from(p!, "base64url").toString()) as Record<string, unknown>,
  };
}

/**
 * A token signed with the real key, with the claims of `base` (a real token) changed by
 * `claims` (a value of undefined removes the claim) and the header by `header`.
 */
export async function resign(
  settings: Settings,
  base: string,
  claims: Record<string, unknown>,
  header: Record<string, unknown> = {},
  key?: { kid: string; key: CryptoKey },
): Promise<string> {
  const real = decodeJwt(base);
  const signer = key ?? (await signingKey(settings));
  const payload = { ...real.payload, ...claims } as JWTPayload;
  for (const [k, v] of Object.entries(claims)) if (v === undefined) delete (payload as Record<string, unknown>)[k];
  return new SignJWT(payload)
    .setProtectedHeader({ ...(real.header as { alg: string }), kid: signer.kid, ...header })
    .sign(signer.key);
}

/**
 * Rate limits lifted, for the tests that make many token requests from one address (the limits
 * themselves are tested by the edge's own tests).
 */
export const NO_RATE_LIMITS = { RATE_LIMIT_TOKEN_PER_MINUTE: "1000000", RATE_LIMIT_V1_PER_SECOND: "1000000" } as const;

/** A partner's key pair for private_key_jwt: its public JWK Set, and assertions signed as a client library signs them. */
export async function partnerKey(alg: "RS384" | "ES384" | "ES256" | "RS256", kid: string) {
  const pair = await generateKeyPair(alg, { extractable: true });
  const publicJwk = { ...(await exportJWK(pair.publicKey)), kid, alg, use: "sig" };
  return {
    alg,
    kid,
    jwks: { keys: [publicJwk] },
    publicJwk,
    /** An assertion for `clientId` to `audience`, valid for `ttl` seconds (any claim or header replaced by `change`). */
    assertion(
      clientId: string,
      audience: string,
      change: { claims?: JWTPayload; header?: Record<string, unknown>; ttl?: number } = {},
    ) {
      const now = Math.floor(Date.now() / 1000);
      const claims = {
        iss: clientId,
        sub: clientId,
        aud: audience,
        jti: randomUUID(),
        iat: now,
        exp: now + (change.ttl ?? 240),
        ...change.claims,
      };
      return new SignJWT(claims).setProtectedHeader({ alg, kid, typ: "JWT", ...change.header }).sign(pair.privateKey);
    },
  };
}

export const CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/** The token request body of an assertion. */
export const assertionBody = (assertion: string, extra: Record<string, string> = {}) => ({
  grant_type: "client_credentials",
  client_assertion_type: CLIENT_ASSERTION_TYPE,
  client_assertion: assertion,
  ...extra,
});
