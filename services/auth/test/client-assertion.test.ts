import { generateKeyPairSync } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "@jest/globals";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import {
  AssertionKeys,
  jwksProblem,
  type FetchedJwks,
  type FetchOutcome,
  type KeySource,
} from "../src/assertion-keys.js";
import {
  checkAssertionClaims,
  claimedAssertion,
  MAX_ASSERTION_LIFETIME_SECONDS,
  ASSERTION_CLOCK_SKEW_SECONDS,
} from "../src/client-assertion.js";

// The rules of a private_key_jwt client assertion (RFC 7523 section 3, SMART Backend Services):
// each failure, one row; every one of them becomes the same invalid_client at the token endpoint.

const now = 1_800_000_000;
const audience = "https://partners.example/oauth/token";
const clientId = "cli_abc";
const good = { iss: clientId, sub: clientId, aud: audience, exp: now + 240, iat: now, jti: "j-1" };
const expect_ = { clientId, audience, now };

describe("checkAssertionClaims", () => {
  it("accepts iss = sub = client id, aud the token endpoint (alone or in an array), exp within five minutes, a jti", () => {
    expect(checkAssertionClaims(good, expect_)).toEqual({ ok: true, accepted: { jti: "j-1", exp: now + 240 } });
    expect(checkAssertionClaims({ ...good, aud: ["other", audience] }, expect_).ok).toBe(true);
    expect(checkAssertionClaims({ ...good, exp: now + MAX_ASSERTION_LIFETIME_SECONDS }, expect_).ok).toBe(true);
    expect(checkAssertionClaims({ ...good, iat: undefined, nbf: now - 5 }, expect_).ok).toBe(true);
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    ["iss another client", { iss: "cli_other" }, /iss/],
    ["sub another client", { sub: "cli_other" }, /sub/],
    ["no sub", { sub: undefined }, /sub/],
    [
      "aud the issuer, not the token endpoint (SMART asks for the token URL)",
      { aud: "https://partners.example" },
      /aud/,
    ],
    ["aud with a trailing slash", { aud: `${audience}/` }, /aud/],
    ["aud missing", { aud: undefined }, /aud/],
    ["aud an array without the token endpoint", { aud: ["https://elsewhere.example/token"] }, /aud/],
    ["exp missing", { exp: undefined }, /exp/],
    ["exp a string", { exp: String(now + 60) }, /exp/],
    ["expired (exp = now)", { exp: now }, /expired/],
    ["expired long ago", { exp: now - 3600 }, /expired/],
    [
      "exp more than five minutes ahead",
      { exp: now + MAX_ASSERTION_LIFETIME_SECONDS + ASSERTION_CLOCK_SKEW_SECONDS + 1 },
      /five minutes/,
    ],
    ["exp an hour ahead", { exp: now + 3600 }, /five minutes/],
    ["nbf in the future", { nbf: now + 60 }, /nbf/],
    ["iat in the future", { iat: now + 60 }, /iat/],
    ["no jti", { jti: undefined }, /jti/],
    ["an empty jti", { jti: "" }, /jti/],
    ["a jti over 256 characters", { jti: "j".repeat(257) }, /jti/],
    ["a jti that is not a string", { jti: 7 }, /jti/],
  ])("refuses %s", (_what, change, reason) => {
    const claims = { ...good, ...change };
    const result = checkAssertionClaims(claims, expect_);
    expect(result.ok).toBe(false);
    expect(result.ok ? "" : result.reason).toMatch(reason);
  });
});

async function sign(alg: string, header: Record<string, unknown>, claims: Record<string, unknown>) {
  const { privateKey } = await generateKeyPair(alg, { extractable: true });
  return new SignJWT(claims).setProtectedHeader({ alg, ...header }).sign(privateKey);
}

describe("claimedAssertion (before any check: which client and key to look up)", () => {
  it("reads alg, kid and iss", async () => {
    expect(claimedAssertion(await sign("ES384", { kid: "k1" }, good))).toEqual({ alg: "ES384", kid: "k1", clientId });
  });

  it.each<[string, () => Promise<string>]>([
    ["not a JWS", async () => "not-a-jwt"],
    ["two parts", async () => "eyJhbGciOiJFUzI1NiJ9.e30"],
    ["bad base64 JSON", async () => "%%%.%%%.%%%"],
    [
      "alg HS256 (a shared secret is not private_key_jwt)",
      () => new SignJWT(good).setProtectedHeader({ alg: "HS256", kid: "k1" }).sign(new Uint8Array(32)),
    ],
    [
      "alg none",
      async () =>
        `${Buffer.from(JSON.stringify({ alg: "none", kid: "k1" })).toString("base64url")}.${Buffer.from(JSON.stringify(good)).toString("base64url")}.`,
    ],
    ["alg PS256 (not one of the four)", () => sign("PS256", { kid: "k1" }, good)],
    ["no kid", () => sign("ES256", {}, good)],
    ["no iss", () => sign("ES256", { kid: "k1" }, { ...good, iss: undefined })],
    ["a crit header", () => sign("ES256", { kid: "k1", crit: ["b64"], b64: true }, good)],
  ])("undefined (malformed) for %s", async (_what, make) => {
    expect(claimedAssertion(await make())).toBeUndefined();
  });
});

describe("jwksProblem (a registration's public keys)", () => {
  it("accepts public RSA and EC keys of the four algorithms", async () => {
    const keys = await Promise.all(
      ["RS384", "ES384", "ES256", "RS256"].map(async (alg, i) => ({
        ...(await exportJWK((await generateKeyPair(alg, { extractable: true })).publicKey)),
        kid: `k${i}`,
        alg,
      })),
    );
    expect(await jwksProblem({ keys })).toBeUndefined();
  });

  it.each<[string, () => Promise<unknown>, RegExp]>([
    ["not a set", async () => [], /JWK Set/],
    ["no keys", async () => ({ keys: [] }), /1 to/],
    [
      "a private key",
      async () => ({
        keys: [{ ...(await exportJWK((await generateKeyPair("ES256", { extractable: true })).privateKey)), kid: "k" }],
      }),
      /private/,
    ],
    [
      "no kid",
      async () => ({ keys: [await exportJWK((await generateKeyPair("ES256", { extractable: true })).publicKey)] }),
      /kid/,
    ],
    [
      "a kid twice",
      async () => {
        const k = await exportJWK((await generateKeyPair("ES256", { extractable: true })).publicKey);
        return {
          keys: [
            { ...k, kid: "a" },
            { ...k, kid: "a" },
          ],
        };
      },
      /twice/,
    ],
    [
      "an encryption key",
      async () => ({
        keys: [
          {
            ...(await exportJWK((await generateKeyPair("ES256", { extractable: true })).publicKey)),
            kid: "k",
            use: "enc",
          },
        ],
      }),
      /use/,
    ],
    [
      "an alg outside the four",
      async () => ({
        keys: [
          {
            ...(await exportJWK((await generateKeyPair("ES256", { extractable: true })).publicKey)),
            kid: "k",
            alg: "ES512",
          },
        ],
      }),
      /alg/,
    ],
    [
      "an RSA key of 1024 bits",
      async () => {
        const { publicKey } = generateKeyPairSync("rsa", { modulusLength: 1024 });
        return { keys: [{ ...publicKey.export({ format: "jwk" }), kid: "k" }] };
      },
      /2048/,
    ],
    ["a symmetric key", async () => ({ keys: [{ kty: "oct", kid: "k", k: "AAAA" }] }), /private|kty/],
    [
      "an alg that does not fit the key's curve",
      async () => ({
        keys: [
          {
            ...(await exportJWK((await generateKeyPair("ES384", { extractable: true })).publicKey)),
            kid: "k",
            alg: "ES256",
          },
        ],
      }),
      /cannot be read/,
    ],
    [
      "an alg that does not fit the key's type",
      async () => ({
        keys: [
          {
            ...(await exportJWK((await generateKeyPair("ES256", { extractable: true })).publicKey)),
            kid: "k",
            alg: "RS256",
          },
        ],
      }),
      /cannot be read/,
    ],
    [
      "an EC key on P-521",
      async () => ({
        keys: [{ ...(await exportJWK((await generateKeyPair("ES512", { extractable: true })).publicKey)), kid: "k" }],
      }),
      /crv/,
    ],
  ])("refuses %s", async (_what, make, reason) => {
    expect(await jwksProblem(await make())).toMatch(reason);
  });
});

describe("AssertionKeys.verify", () => {
  it("verifies with the credential's key of that kid, and with nothing else", async () => {
    const keys = new AssertionKeys({ allowInsecure: true });
    await keys.start();
    const pair = await generateKeyPair("RS384", { extractable: true });
    const credential = { _id: "cli_k", jwks: { keys: [{ ...(await exportJWK(pair.publicKey)), kid: "k1" }] } };
    const assertion = await new SignJWT(good).setProtectedHeader({ alg: "RS384", kid: "k1" }).sign(pair.privateKey);
    expect(await keys.verify(assertion, claimedAssertion(assertion), credential)).toMatchObject({ jti: "j-1" });
    // Unknown client, no keys, an unknown kid, another key under the right kid, a malformed one.
    expect(await keys.verify(assertion, claimedAssertion(assertion), undefined)).toBeUndefined();
    expect(await keys.verify(assertion, claimedAssertion(assertion), { _id: "cli_none" })).toBeUndefined();
    const otherKid = await new SignJWT(good).setProtectedHeader({ alg: "RS384", kid: "k2" }).sign(pair.privateKey);
    expect(await keys.verify(otherKid, claimedAssertion(otherKid), credential)).toBeUndefined();
    const forged = await sign("RS384", { kid: "k1" }, good);
    expect(await keys.verify(forged, claimedAssertion(forged), credential)).toBeUndefined();
    expect(await keys.verify("x.y.z", undefined, credential)).toBeUndefined();
  });
});

describe("AssertionKeys with a JWK Set URL: no request waits for the host", () => {
  /** A host that answers its first `answering` requests with `jwks` and holds every later one open, unanswered. */
  async function keyHost(jwks: object, answering: number) {
    const held: ServerResponse[] = [];
    let asked = 0;
    let onHeld: (() => void) | undefined;
    const server = createServer((_req, res) => {
      if (asked++ < answering) res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(jwks));
      else {
        held.push(res);
        onHeld?.();
      }
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`,
      asked: () => asked,
      held,
      /** Resolves once a request is being held. */
      nextHeld: () => new Promise<void>((r) => (onHeld = r)),
      close: async () => {
        for (const res of held) res.destroy();
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      },
    };
  }

  it("a kid the stored set lacks fails at once while the fetch it asked for is still held by the host; the registered kid keeps verifying; a failure is remembered", async () => {
    const pair = await generateKeyPair("ES384", { extractable: true });
    const jwks = { keys: [{ ...(await exportJWK(pair.publicKey)), kid: "k1" }] };
    const host = await keyHost(jwks, 1);
    const recorded: FetchOutcome[] = [];
    const keys = new AssertionKeys({
      allowInsecure: true,
      timeoutMs: 30_000,
      record: async (_url, outcome) => void recorded.push(outcome),
    });
    await keys.start();
    try {
      const registered = await keys.fetchSet(host.url);
      expect(registered).toMatchObject({ jwks });
      // Registered a minute ago: past the cooldown, so an unknown kid may ask for the set again.
      const credential: KeySource = {
        _id: "cli_u",
        jwksUrl: host.url,
        jwksFetched: { ...(registered as FetchedJwks), fetchedAt: new Date(Date.now() - 60_000) },
      };
      const held = host.nextHeld();
      const unknownKid = await new SignJWT(good).setProtectedHeader({ alg: "ES384", kid: "k2" }).sign(pair.privateKey);
      expect(await keys.verify(unknownKid, claimedAssertion(unknownKid), credential)).toBeUndefined();
      await held;
      // The fetch for k2 is in flight, unanswered: the verdict above did not wait for it.
      expect([host.asked(), host.held.length, recorded]).toEqual([2, 1, []]);
      const known = await new SignJWT(good).setProtectedHeader({ alg: "ES384", kid: "k1" }).sign(pair.privateKey);
      expect(await keys.verify(known, claimedAssertion(known), credential)).toMatchObject({ jti: "j-1" });
      // More unknown kids within the cooldown ask the host nothing more.
      for (let i = 0; i < 5; i++)
        expect(await keys.verify(unknownKid, claimedAssertion(unknownKid), credential)).toBeUndefined();
      expect(host.asked()).toBe(2);
      // The host fails the fetch: the failure is what gets stored (the set stays as it was).
      host.held[0]!.destroy();
      await keys.stop();
      expect(recorded).toEqual([
        { problem: expect.stringMatching(/could not be fetched/), failedAt: expect.any(Date) },
      ]);
      // Another replica reads the stored failure: it asks nothing within the cooldown either.
      const other = new AssertionKeys({ allowInsecure: true });
      await other.start();
      expect(
        await other.verify(unknownKid, claimedAssertion(unknownKid), {
          ...credential,
          jwksFetchFailedAt: (recorded[0] as { failedAt: Date }).failedAt,
        }),
      ).toBeUndefined();
      expect(host.asked()).toBe(2);
    } finally {
      await host.close();
    }
  });

  it("a credential with no stored set yet (an older release's) fails at once and asks for the set in the background; the next request verifies", async () => {
    const pair = await generateKeyPair("ES256", { extractable: true });
    const jwks = { keys: [{ ...(await exportJWK(pair.publicKey)), kid: "k1" }] };
    const host = await keyHost(jwks, 1);
    const recorded: FetchOutcome[] = [];
    const keys = new AssertionKeys({
      allowInsecure: true,
      record: async (_url, outcome) => void recorded.push(outcome),
    });
    await keys.start();
    try {
      const credential: KeySource = { _id: "cli_old", jwksUrl: host.url };
      const first = await new SignJWT(good).setProtectedHeader({ alg: "ES256", kid: "k1" }).sign(pair.privateKey);
      expect(await keys.verify(first, claimedAssertion(first), credential)).toBeUndefined();
      await keys.stop();
      expect(recorded).toEqual([{ jwks, fetchedAt: expect.any(Date) }]);
      expect(
        await keys.verify(first, claimedAssertion(first), { ...credential, jwksFetched: recorded[0] as FetchedJwks }),
      ).toMatchObject({ jti: "j-1" });
    } finally {
      await host.close();
    }
  });

  it("the scheduled round fetches only sets missing or past their age, not within the cooldown of a failure", async () => {
    const pair = await generateKeyPair("ES256", { extractable: true });
    const jwks = { keys: [{ ...(await exportJWK(pair.publicKey)), kid: "k1" }] };
    const host = await keyHost(jwks, 10);
    const keys = new AssertionKeys({ allowInsecure: true, record: async () => {} });
    await keys.start();
    try {
      const old = new Date(Date.now() - 11 * 60_000);
      expect(
        await keys.refreshDue([{ _id: "a", jwksUrl: host.url, jwksFetched: { jwks, fetchedAt: new Date() } }]),
      ).toBe(0);
      expect(
        await keys.refreshDue([
          { _id: "a", jwksUrl: `${host.url}?b`, jwksFetched: { jwks, fetchedAt: old }, jwksFetchFailedAt: new Date() },
        ]),
      ).toBe(0);
      expect(host.asked()).toBe(0);
      // Two credentials of one URL, one of them without a set: one fetch.
      expect(
        await keys.refreshDue([
          { _id: "a", jwksUrl: host.url, jwksFetched: { jwks, fetchedAt: new Date() } },
          { _id: "c", jwksUrl: host.url },
        ]),
      ).toBe(1);
      expect(host.asked()).toBe(1);
    } finally {
      await host.close();
    }
  });
});
