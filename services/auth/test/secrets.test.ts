import { describe, expect, it } from "@jest/globals";
import { createHmac, randomBytes } from "node:crypto";
import { LocalKeyWrapper, newDataKeysEntry } from "@pi/common/store/data-keys";
import { newSecret } from "@pi/common/rules/ids";
import {
  DUMMY_HASH,
  hashNewSecret,
  hashSecret,
  peppersOf,
  SecretSealer,
  secretMatches,
  type Peppers,
} from "../src/secrets.js";

const pepper = randomBytes(32).toString("base64url");
const peppers = peppersOf({ CREDENTIAL_PEPPER: pepper })!;

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
    expect(hashNewSecret(peppers, secret)).toEqual({ secretHash: hashSecret(pepper, secret), pepperId: "p1" });
  });

  it("the right secret matches; a wrong one, or any against the dummy hash, does not", () => {
    const secret = newSecret("sk_live");
    const stored = hashNewSecret(peppers, secret);
    expect(secretMatches(peppers, secret, stored)).toBe(true);
    expect(secretMatches(peppers, `${secret}x`, stored)).toBe(false);
    expect(secretMatches(peppers, "", stored)).toBe(false);
    expect(secretMatches(peppers, secret, undefined)).toBe(false);
    expect(secretMatches(peppers, secret, { secretHash: DUMMY_HASH })).toBe(false);
  });

  it("a malformed stored hash is a mismatch, not a crash", () => {
    expect(secretMatches(peppers, "x", { secretHash: "not-hex" })).toBe(false);
  });
});

describe("peppers are versioned: each hash names its pepper, so a new one can be introduced", () => {
  const next = randomBytes(32).toString("base64url");
  const rotated = peppersOf({ CREDENTIAL_PEPPER: pepper, CREDENTIAL_PEPPERS: `p2:${next}` })!;

  it("CREDENTIAL_PEPPER alone is p1; CREDENTIAL_PEPPERS puts newer ones in front, CREDENTIAL_PEPPER staying p1", () => {
    expect(peppers.current).toBe("p1");
    expect(rotated.current).toBe("p2");
    expect([...rotated.byId.keys()]).toEqual(["p2", "p1"]);
    expect(peppersOf({})).toBeUndefined();
    // A list that names p1 itself wins over CREDENTIAL_PEPPER.
    expect(
      peppersOf({ CREDENTIAL_PEPPER: pepper, CREDENTIAL_PEPPERS: `p2:${next},p1:${"z".repeat(32)}` })!.byId.get("p1"),
    ).toBe("z".repeat(32));
  });

  it("new secrets are hashed with the newest pepper; hashes of the old one still verify", () => {
    const old = newSecret("sk_live");
    const withId = hashNewSecret(peppers, old);
    const fresh = newSecret("sk_live");
    const stored = hashNewSecret(rotated, fresh);
    expect(stored.pepperId).toBe("p2");
    expect(stored.secretHash).toBe(hashSecret(next, fresh));
    expect(secretMatches(rotated, old, withId)).toBe(true);
    expect(secretMatches(rotated, fresh, stored)).toBe(true);
    // The id decides which pepper is used: the same hash under another id does not verify.
    expect(secretMatches(rotated, fresh, { ...stored, pepperId: "p1" })).toBe(false);
  });

  it("a hash whose pepper is no longer configured is a mismatch (never checked with another pepper)", () => {
    const secret = newSecret("sk_live");
    const stored = hashNewSecret(rotated, secret);
    const dropped: Peppers = peppersOf({ CREDENTIAL_PEPPERS: `p3:${randomBytes(32).toString("base64url")}` })!;
    expect(secretMatches(dropped, secret, stored)).toBe(false);
    expect(secretMatches(rotated, secret, { ...stored, pepperId: "p9" })).toBe(false);
  });
});

describe("sealed secrets (signing secrets, private keys): the KEKs of DATA_KEYS, not the pepper", () => {
  const k1 = newDataKeysEntry("k1");
  const sealer = new SecretSealer(LocalKeyWrapper.fromSetting(k1));

  it("round-trip, with a fresh data key each time, versioned by the KEK's id, and bound to their kind", async () => {
    const a = await sealer.seal("whsec_abc", "webhook-signing-secret");
    const b = await sealer.seal("whsec_abc", "webhook-signing-secret");
    expect(a).not.toBe(b);
    expect(a).toMatch(/^v2\.k1\./);
    expect(a).not.toContain("whsec_abc");
    expect(await sealer.unseal(a, "webhook-signing-secret")).toBe("whsec_abc");
    await expect(sealer.unseal(a, "token-signing-key")).rejects.toThrow();
    expect(sealer.isCurrent(a)).toBe(true);
  });

  it("open only under the KEK that sealed them: another key under the same id does not open them", async () => {
    const sealed = await sealer.seal("whsec_abc", "webhook-signing-secret");
    expect(await new SecretSealer(LocalKeyWrapper.fromSetting(k1)).unseal(sealed, "webhook-signing-secret")).toBe(
      "whsec_abc",
    );
    await expect(
      new SecretSealer(LocalKeyWrapper.fromSetting(newDataKeysEntry("k1"))).unseal(sealed, "webhook-signing-secret"),
    ).rejects.toThrow();
  });

  it("after a KEK rotation old values still open, new ones use the new KEK, and the old ones are no longer current", async () => {
    const old = await sealer.seal("whsec_abc", "webhook-signing-secret");
    const rotated = new SecretSealer(LocalKeyWrapper.fromSetting(`${newDataKeysEntry("k2")},${k1}`));
    expect(await rotated.unseal(old, "webhook-signing-secret")).toBe("whsec_abc");
    expect(rotated.isCurrent(old)).toBe(false);
    expect(await rotated.seal("x", "token-signing-key")).toMatch(/^v2\.k2\./);
  });
});
