import { describe, expect, it } from "@jest/globals";
import { AuthenticationCache, type Authenticated } from "../src/authentication-cache.js";
import { hashSecret } from "../src/secrets.js";

// The cache of successful authentications behind the token endpoint: found only with the right
// client id and secret, emptied by any change, never refilled from reads that predate it, bounded,
// and unused while the replica cannot vouch for its invalidations.

const pepper = "pepper";
const secretA = "sk_live_a";
const hashA = hashSecret(pepper, secretA);
const a: Authenticated = {
  clientId: "cli_a",
  partnerId: "ptr_1",
  mode: "live",
  scopes: ["connections:write", "files:write"],
};
const aTest: Authenticated = { clientId: "cli_a_test", partnerId: "ptr_1", mode: "test", scopes: ["files:write"] };
const b: Authenticated = { clientId: "cli_b", partnerId: "ptr_2", mode: "live", scopes: ["files:write"] };

function filled(trusted?: () => boolean) {
  const cache = new AuthenticationCache(trusted);
  expect(cache.keep(cache.ticket(), hashA, a)).toBe(true);
  expect(cache.keep(cache.ticket(), hashA, aTest)).toBe(true);
  expect(cache.keep(cache.ticket(), hashA, b)).toBe(true);
  return cache;
}

describe("AuthenticationCache", () => {
  it("finds a kept authentication only with the same client id and the same secret hash", () => {
    const cache = filled();
    expect(cache.get("cli_a", hashA)).toEqual(a);
    expect(cache.get("cli_a", hashSecret(pepper, "sk_live_wrong"))).toBeUndefined();
    expect(cache.get("cli_unknown", hashA)).toBeUndefined();
    // Another client's id with this client's secret: nothing.
    expect(cache.get("cli_c", hashA)).toBeUndefined();
    // A client id that tries to smuggle a key of its own.
    expect(cache.get(`cli_a:${hashA}`, hashA)).toBeUndefined();
  });

  it("clearing (any partner event, or a change made on this replica) drops every entry", () => {
    const cache = filled();
    cache.clear();
    expect([cache.get("cli_a", hashA), cache.get("cli_a_test", hashA), cache.get("cli_b", hashA)]).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
  });

  it("reads begun before a drop are not kept after it (a revocation racing a token request cannot leave the credential cached)", () => {
    const cache = new AuthenticationCache();
    const ticket = cache.ticket(); // the request starts its reads: the credential is still active
    cache.clear(); // the revocation is written, and the cache cleared here
    expect(cache.keep(ticket, hashA, a)).toBe(false);
    expect(cache.get("cli_a", hashA)).toBeUndefined();
    // Reads begun after the drop are kept.
    expect(cache.keep(cache.ticket(), hashA, a)).toBe(true);
    expect(cache.get("cli_a", hashA)).toEqual(a);
  });

  it("is bounded: past `max` entries the least recently used goes", () => {
    const cache = new AuthenticationCache(undefined, { max: 2 });
    cache.keep(cache.ticket(), hashA, a);
    cache.keep(cache.ticket(), hashA, b);
    cache.get("cli_a", hashA);
    cache.keep(cache.ticket(), hashA, aTest);
    expect(cache.get("cli_b", hashA)).toBeUndefined();
    expect(cache.get("cli_a", hashA)).toEqual(a);
    expect(cache.get("cli_a_test", hashA)).toEqual(aTest);
  });

  it("forgets an entry after its TTL, a safety net should an event never arrive", () => {
    let now = 1_000;
    const cache = new AuthenticationCache(undefined, { ttl: 60_000, ttlResolution: 0, perf: { now: () => now } });
    cache.keep(cache.ticket(), hashA, a);
    now += 59_000;
    expect(cache.get("cli_a", hashA)).toEqual(a);
    now += 2_000;
    expect(cache.get("cli_a", hashA)).toBeUndefined();
  });

  it("while the replica cannot vouch for its invalidations, serves nothing, keeps nothing, and drops what it held", () => {
    let trusted = true;
    const cache = filled(() => trusted);
    trusted = false;
    const ticket = cache.ticket();
    expect(cache.get("cli_a", hashA)).toBeUndefined();
    expect(cache.keep(cache.ticket(), hashA, a)).toBe(false);
    trusted = true;
    // What was read before trust came back may predate a missed event: not kept.
    expect(cache.keep(ticket, hashA, a)).toBe(false);
    expect(cache.get("cli_b", hashA)).toBeUndefined();
    expect(cache.keep(cache.ticket(), hashA, a)).toBe(true);
    expect(cache.get("cli_a", hashA)).toEqual(a);
  });
});
