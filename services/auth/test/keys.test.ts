import { describe, expect, it } from "@jest/globals";
import { retiredKeys, signingKeyOf, type StoredKey } from "../src/keys.js";

// Key rotation without downtime: a new key is published before it signs, and old keys keep
// verifying until every token they signed has expired.

const key = (kid: string, activatesAt: number | undefined, createdAt = 0): StoredKey => ({
  kid,
  publicJwk: { kid },
  sealedPrivateJwk: "",
  createdAt: new Date(createdAt),
  activatesAt: activatesAt === undefined ? undefined : new Date(activatesAt),
});

const ttl = 900_000;
const margin = 60_000;

describe("signing key selection", () => {
  it("the key activated most recently signs; a key not yet active does not", () => {
    const keys = [key("a", 0), key("b", 1000), key("c", 5000)];
    expect(signingKeyOf(keys, 999).kid).toBe("a");
    expect(signingKeyOf(keys, 1000).kid).toBe("b");
    expect(signingKeyOf(keys, 4999).kid).toBe("b");
    expect(signingKeyOf(keys, 5000).kid).toBe("c");
  });

  it("a key stored before activation times existed activates at its creation", () => {
    expect(signingKeyOf([key("old", undefined, 10), key("new", 2000)], 1500).kid).toBe("old");
    expect(signingKeyOf([key("old", undefined, 10), key("new", 2000)], 2500).kid).toBe("new");
  });
});

describe("key retirement", () => {
  it("keeps a superseded key while tokens it signed may still be unexpired", () => {
    const keys = [key("a", 0), key("b", 1000)];
    expect(retiredKeys(keys, 1000 + ttl + margin - 1, ttl, margin)).toEqual([]);
  });

  it("drops a superseded key once its successor has signed for longer than the token lifetime and a margin", () => {
    const keys = [key("a", 0), key("b", 1000)];
    expect(retiredKeys(keys, 1000 + ttl + margin, ttl, margin).map((k) => k.kid)).toEqual(["a"]);
  });

  it("never drops the signing key or a key waiting to activate", () => {
    const now = 10 * ttl;
    const keys = [key("a", 0), key("b", 1000), key("pending", now + 5000)];
    expect(retiredKeys(keys, now, ttl, margin).map((k) => k.kid)).toEqual(["a"]);
    expect(retiredKeys([key("only", 0)], now, ttl, margin)).toEqual([]);
  });

  it("a key is judged by its own successor, not by the newest key", () => {
    const now = 10 * ttl;
    // b replaced a long ago; c replaced b only just now: b's tokens may still be alive.
    const keys = [key("a", 0), key("b", 1000), key("c", now - 1000)];
    expect(retiredKeys(keys, now, ttl, margin).map((k) => k.kid)).toEqual(["a"]);
  });
});
