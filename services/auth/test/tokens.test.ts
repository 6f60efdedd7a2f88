import { describe, expect, it } from "@jest/globals";
import { reinstatementWaitMs, tokenTimes } from "../src/tokens.js";

// expires_in is the token's lifetime in seconds: the token must be accepted that long. A verifier
// (jose) takes the token as expired once the whole second it reads reaches `exp`.

describe("token lifetime", () => {
  const acceptedForMs = (mintedAtMs: number, exp: number) => exp * 1000 - mintedAtMs;

  it.each([0, 1, 500, 999])(
    "a token minted %d ms into a second is accepted for at least its whole TTL",
    (intoSecond) => {
      const mintedAtMs = 1_800_000_000_000 + intoSecond;
      for (const ttl of [1, 900]) {
        const { iat, exp } = tokenTimes(mintedAtMs, ttl);
        expect(iat).toBe(1_800_000_000);
        expect(acceptedForMs(mintedAtMs, exp)).toBeGreaterThanOrEqual(ttl * 1000);
        expect(acceptedForMs(mintedAtMs, exp)).toBeLessThan(ttl * 1000 + 1000);
      }
    },
  );

  it("a token minted on a whole second lives exactly its TTL", () => {
    expect(tokenTimes(1_800_000_000_000, 1)).toEqual({ iat: 1_800_000_000, exp: 1_800_000_001 });
  });
});

describe("reinstatementWaitMs: no token issued after a reinstatement shares the suspension's second", () => {
  it.each([
    [undefined, 5_000, 0],
    [1_200, 5_000, 0],
    [4_000, 4_999, 1],
    [4_300, 4_300, 700],
    [4_999, 5_000, 0],
  ])("suspended at %s, reinstated at %d: waits %d ms", (suspendedAt, now, wait) => {
    expect(reinstatementWaitMs(suspendedAt, now)).toBe(wait);
    // The reinstatement then lands in a later second, where a fresh token's iat is past the cutoff.
    if (suspendedAt !== undefined)
      expect(Math.floor((now + wait) / 1000)).toBeGreaterThan(Math.floor(suspendedAt / 1000));
  });
});
