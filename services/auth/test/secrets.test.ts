import { describe, expect, it } from "@jest/globals";
import { createHmac, randomBytes } from "node:crypto";
import { newSecret } from "@pi/common";
import { DUMMY_HASH, hashSecret, seal, secretMatches, unseal } from "../src/secrets.js";

const pepper = randomBytes(32).toString("base64url");

describe("client secrets are stored only as a peppered HMAC-SHA256", () => {
  it("client secrets are 256-bit random values", () => {
    const secret = newSecret("sk_live");
    expect(secret).toMatch(/^sk_live_[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(secret.slice("sk_live_".length), "base64url")).toHaveLength(32);
    expect(newSecret("sk_live")).not.toBe(secret);
  });

  it("the hash is HMAC-SHA256 keyed with the pepper: the database alone cannot check a guess", () => {
    const secret = newSecret("sk_live");
    expect(hashSecret(pepper, secret)).toBe(createHmac("sha256", pepper).update(secret).digest("hex"));
    expect(hashSecret(pepper, secret)).not.toBe(hashSecret(randomBytes(32).toString("base64url"), secret));
    expect(hashSecret(pepper, secret)).not.toContain(secret);
  });

  it("the right secret matches; a wrong one, or any against the dummy hash, does not", () => {
    const secret = newSecret("sk_live");
    const stored = hashSecret(pepper, secret);
    expect(secretMatches(pepper, secret, stored)).toBe(true);
    expect(secretMatches(pepper, `${secret}x`, stored)).toBe(false);
    expect(secretMatches(pepper, "", stored)).toBe(false);
    expect(secretMatches(pepper, secret, undefined)).toBe(false);
    expect(secretMatches(pepper, secret, DUMMY_HASH)).toBe(false);
  });

  it("a malformed stored hash is a mismatch, not a crash", () => {
    expect(secretMatches(pepper, "x", "not-hex")).toBe(false);
  });
});

describe("sealed secrets (signing secrets, private keys)", () => {
  it("round-trip, with a fresh nonce each time, and refuse another pepper or a tampered box", () => {
    const a = seal(pepper, "whsec_abc");
    const b = seal(pepper, "whsec_abc");
    expect(a).not.toBe(b);
    expect(a).not.toContain("whsec_abc");
    expect(unseal(pepper, a)).toBe("whsec_abc");
    expect(() => unseal(randomBytes(32).toString("base64url"), a)).toThrow();
    const [v, iv, tag, body] = a.split(".");
    const flipped = Buffer.from(body!, "base64url");
    flipped[0] ^= 1;
    expect(() => unseal(pepper, [v, iv, tag, flipped.toString("base64url")].join("."))).toThrow();
    expect(() => unseal(pepper, "plain")).toThrow();
  });
});
