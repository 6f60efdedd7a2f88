import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";

// Client secrets are 256-bit random values, so a keyed fast hash (HMAC-SHA256 with a pepper kept
// outside the database) is as strong as a slow password hash here, and keeps the token endpoint fast.

export function hashSecret(pepper: string, secret: string): string {
  return createHmac("sha256", pepper).update(secret, "utf8").digest("hex");
}

// The stored hash of the decoy credential (store.ts), compared against when the client is unknown,
// so that path costs the same as a wrong secret. No secret hashes to it.
export const DUMMY_HASH = "0".repeat(64);

/** Constant-time check of a presented secret; an absent stored hash runs the same comparison. */
export function secretMatches(pepper: string, presented: string, storedHash: string | undefined): boolean {
  return hashMatches(hashSecret(pepper, presented), storedHash);
}

/** secretMatches for a presented secret already hashed with hashSecret. */
export function hashMatches(presentedHash: string, storedHash: string | undefined): boolean {
  const expected = Buffer.from(storedHash ?? DUMMY_HASH, "hex");
  const actual = Buffer.from(presentedHash, "hex");
  const equal = expected.length === actual.length && timingSafeEqual(expected, actual);
  return equal && storedHash !== undefined;
}

function sealingKey(pepper: string): Buffer {
  return Buffer.from(hkdfSync("sha256", pepper, "pi-auth", "sealed-secrets-v1", 32));
}

/**
 * Secrets the service itself must use later (webhook signing secrets, JWT private keys) cannot be
 * hashed; they are stored sealed with AES-256-GCM under a key derived from the pepper.
 */
export function seal(pepper: string, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", sealingKey(pepper), iv);
  const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
  return ["v1", iv.toString("base64url"), cipher.getAuthTag().toString("base64url"), body.toString("base64url")].join(".");
}

export function unseal(pepper: string, sealed: string): string {
  const [version, iv, tag, body] = sealed.split(".");
  if (version !== "v1" || !iv || !tag || body === undefined) throw new Error("not a sealed secret");
  const decipher = createDecipheriv("aes-256-gcm", sealingKey(pepper), Buffer.from(iv, "base64url"));
  decipher.setAuthTag(Buffer.from(tag, "base64url"));
  return Buffer.concat([decipher.update(Buffer.from(body, "base64url")), decipher.final()]).toString("utf8");
}
