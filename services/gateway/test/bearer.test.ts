import { describe, expect, it } from "@jest/globals";
import { exportJWK, generateKeyPair, SignJWT, type JWK } from "jose";
import { create } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import type { AuthClient } from "@pi/common/rpc/clients";
import { bearerTokenOf, BearerVerifier, issuedBeforeSuspension, RevocationList } from "../src/bearer.js";
import { applyPartnerEvent } from "../src/revocation-feed.js";

// Local bearer verification (no call to the auth service per request), with a stand-in for the
// auth service's GetJwks that counts its calls.

async function keyPair(kid: string) {
  const { publicKey, privateKey } = await generateKeyPair("ES256", { extractable: true });
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "ES256", use: "sig" } as JWK };
}

function fakeAuth(keys: () => JWK[]) {
  const calls = { getJwks: 0 };
  const auth = {
    async getJwks() {
      calls.getJwks++;
      return { jwksJson: JSON.stringify({ keys: keys() }), issuer: "pi-auth", audience: "partner-api" };
    },
  } as unknown as AuthClient;
  return { auth, calls };
}

async function token(key: { kid: string; privateKey: CryptoKey }, claims: Record<string, unknown> = {}, ttl = 60) {
  const now = Math.floor(Date.now() / 1000);
  const payload = {
    sub: "ptr_a",
    iss: "pi-auth",
    aud: "partner-api",
    jti: "tok_1",
    iat: now,
    exp: now + ttl,
    client_id: "cli_a",
    mode: "live",
    scope: "connections:write files:write",
    ...claims,
  };
  return new SignJWT(payload).setProtectedHeader({ alg: "ES256", kid: key.kid, typ: "at+jwt" }).sign(key.privateKey);
}

describe("bearerTokenOf (RFC 6750 section 2.1)", () => {
  it.each([
    ["Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"],
    ["bearer abc", "abc"],
    ["BEARER abc==", "abc=="],
    ["Bearer  abc", "abc"],
  ])("%j gives the token", (header, expected) => {
    expect(bearerTokenOf(header)).toBe(expected);
  });

  it.each([undefined, "", "Bearer", "Bearer ", "Basic abc", "abc", "Bearer a b", "Bearer a!b", "Bearer =abc"])(
    "%j is malformed",
    (header) => {
      expect(bearerTokenOf(header)).toBeUndefined();
    },
  );
});

describe("issuedBeforeSuspension (tokens carry whole seconds)", () => {
  it.each([
    [99, 100_000, true],
    [100, 100_000, true],
    [100, 100_999, true],
    [101, 100_999, false],
    [101, 100_000, false],
  ])("iat %d against a suspension at %d ms: %s", (iat, at, expected) => {
    expect(issuedBeforeSuspension(iat, at)).toBe(expected);
  });
});

describe("BearerVerifier", () => {
  it("accepts a valid token and reads partner, credential, mode and scopes from it", async () => {
    const k = await keyPair("key_1");
    const { auth } = fakeAuth(() => [k.jwk]);
    const verifier = new BearerVerifier(auth, new RevocationList());
    expect(await verifier.verify(await token(k, { mode: "test", scope: "files:write" }))).toEqual({
      partnerId: "ptr_a",
      clientId: "cli_a",
      mode: "test",
      scopes: new Set(["files:write"]),
    });
  });

  it("verifies with cached keys: one key fetch for many requests", async () => {
    const k = await keyPair("key_1");
    const { auth, calls } = fakeAuth(() => [k.jwk]);
    const verifier = new BearerVerifier(auth, new RevocationList());
    for (let i = 0; i < 20; i++) expect(await verifier.verify(await token(k))).toBeDefined();
    expect(calls.getJwks).toBe(1);
  });

  it("refuses an expired token, a wrong audience or issuer, a missing expiry, a wrong type", async () => {
    const k = await keyPair("key_1");
    const verifier = new BearerVerifier(fakeAuth(() => [k.jwk]).auth, new RevocationList());
    expect(await verifier.verify(await token(k, {}, -1))).toBeUndefined();
    expect(await verifier.verify(await token(k, { aud: "other" }))).toBeUndefined();
    expect(await verifier.verify(await token(k, { iss: "other" }))).toBeUndefined();
    const noExp = await new SignJWT({ client_id: "cli_a", mode: "live", scope: "" })
      .setProtectedHeader({ alg: "ES256", kid: k.kid, typ: "at+jwt" })
      .setSubject("ptr_a")
      .setIssuer("pi-auth")
      .setAudience("partner-api")
      .setJti("tok_1")
      .setIssuedAt()
      .sign(k.privateKey);
    expect(await verifier.verify(noExp)).toBeUndefined();
    const jwtTyp = await new SignJWT({ client_id: "cli_a", mode: "live", scope: "" })
      .setProtectedHeader({ alg: "ES256", kid: k.kid, typ: "JWT" })
      .setSubject("ptr_a")
      .setIssuer("pi-auth")
      .setAudience("partner-api")
      .setJti("tok_1")
      .setIssuedAt()
      .setExpirationTime("1m")
      .sign(k.privateKey);
    expect(await verifier.verify(jwtTyp)).toBeUndefined();
    expect(await verifier.verify("garbage")).toBeUndefined();
  });

  it("refuses a token of a revoked credential or a suspended partner; reinstatement does not revive it, a token issued after it passes", async () => {
    const k = await keyPair("key_1");
    const list = new RevocationList();
    const verifier = new BearerVerifier(fakeAuth(() => [k.jwk]).auth, list);
    const now = Math.floor(Date.now() / 1000);
    const t = await token(k, { iat: now - 10 });
    const suspendedAt = BigInt((now - 5) * 1000 + 300);
    const event = (kind: eventsv1.PartnerEventKind, clientId = "") =>
      create(eventsv1.PartnerEventSchema, { kind, partnerId: "ptr_a", clientId, occurredAt: suspendedAt, suspendedAt });
    expect(await verifier.verify(t)).toBeDefined();
    applyPartnerEvent(list, event(eventsv1.PartnerEventKind.PARTNER_SUSPENDED));
    expect(await verifier.verify(t)).toBeUndefined();
    applyPartnerEvent(list, event(eventsv1.PartnerEventKind.PARTNER_REINSTATED));
    // Remembered as verified before the suspension, and still refused.
    expect(await verifier.verify(t)).toBeUndefined();
    const after = await token(k, { iat: now - 4, jti: "tok_2" });
    expect(await verifier.verify(after)).toBeDefined();
    applyPartnerEvent(list, event(eventsv1.PartnerEventKind.CREDENTIAL_REVOKED, "cli_other"));
    expect(await verifier.verify(after)).toBeDefined();
    applyPartnerEvent(list, event(eventsv1.PartnerEventKind.CREDENTIAL_REVOKED, "cli_a"));
    expect(await verifier.verify(after)).toBeUndefined();
    // Reinstating the partner does not bring back a revoked credential.
    applyPartnerEvent(list, event(eventsv1.PartnerEventKind.PARTNER_REINSTATED));
    expect(await verifier.verify(after)).toBeUndefined();
  });

  it("tokens that stay dead: a suspension cuts off by its suspended_at; an older reinstatement never lowers the cutoff", () => {
    const list = new RevocationList();
    const p = { partnerId: "ptr_a", clientId: "cli_a" };
    applyPartnerEvent(
      list,
      create(eventsv1.PartnerEventSchema, {
        kind: eventsv1.PartnerEventKind.PARTNER_SUSPENDED,
        partnerId: "ptr_a",
        occurredAt: 60_000n,
        suspendedAt: 50_500n,
      }),
    );
    applyPartnerEvent(
      list,
      create(eventsv1.PartnerEventSchema, {
        kind: eventsv1.PartnerEventKind.PARTNER_REINSTATED,
        partnerId: "ptr_a",
        suspendedAt: 20_000n,
      }),
    );
    expect(list.blocks(p, { kid: "k", iat: 50 })).toBe(true);
    expect(list.blocks(p, { kid: "k", iat: 51 })).toBe(false);
    // Another partner is untouched.
    expect(list.blocks({ partnerId: "ptr_b", clientId: "cli_b" }, { kid: "k", iat: 1 })).toBe(false);
  });

  it("emergency key revocation: the key's tokens are refused at once, remembered ones too, other keys' are kept; the key set is refreshed", async () => {
    const a = await keyPair("key_a");
    const b = await keyPair("key_b");
    const { auth, calls } = fakeAuth(() => [a.jwk, b.jwk]);
    const list = new RevocationList();
    const verifier = new BearerVerifier(auth, list);
    const ta = await token(a);
    const tb = await token(b);
    expect(await verifier.verify(ta)).toBeDefined();
    expect(await verifier.verify(tb)).toBeDefined();
    expect(verifier.remembered).toBe(2);
    const refreshes = calls.getJwks;
    applyPartnerEvent(
      list,
      create(eventsv1.PartnerEventSchema, { kind: eventsv1.PartnerEventKind.SIGNING_KEY_REVOKED, kid: "key_a" }),
    );
    expect(calls.getJwks).toBe(refreshes + 1);
    // Still published by the stand-in (a replica not yet reloaded): refused all the same, and not remembered.
    expect(await verifier.verify(ta)).toBeUndefined();
    expect(await verifier.verify(await token(a, { jti: "tok_new" }))).toBeUndefined();
    expect(await verifier.verify(tb)).toBeDefined();
    expect(verifier.remembered).toBe(2);
  });

  it("key rotation: a token under a newly published key id is accepted after one refresh", async () => {
    const a = await keyPair("key_a");
    const b = await keyPair("key_b");
    let published = [a.jwk];
    const { auth, calls } = fakeAuth(() => published);
    const verifier = new BearerVerifier(auth, new RevocationList());
    expect(await verifier.verify(await token(a))).toBeDefined();
    published = [a.jwk, b.jwk];
    // The unknown-kid refresh is rate-limited; a periodic refresh (service.ts) picks the key up.
    await verifier.refreshKeys();
    expect(await verifier.verify(await token(b))).toBeDefined();
    expect(await verifier.verify(await token(a))).toBeDefined();
    expect(calls.getJwks).toBe(2);
  });

  it("a token verified before is refused once it expires (the remembered claims are checked against the clock)", async () => {
    const k = await keyPair("key_1");
    let clock = Date.now();
    const verifier = new BearerVerifier(fakeAuth(() => [k.jwk]).auth, new RevocationList(), () => clock);
    const t = await token(k, {}, 60);
    const { exp } = JSON.parse(Buffer.from(t.split(".")[1]!, "base64url").toString()) as { exp: number };
    expect(await verifier.verify(t)).toBeDefined();
    clock = exp * 1000 - 1;
    expect(await verifier.verify(t)).toBeDefined();
    clock = exp * 1000;
    expect(await verifier.verify(t)).toBeUndefined();
    expect(await verifier.verify(t)).toBeUndefined();
  });

  it("a token verified before is refused once a refresh no longer publishes its key (retired)", async () => {
    const a = await keyPair("key_a");
    const b = await keyPair("key_b");
    let published = [a.jwk, b.jwk];
    const verifier = new BearerVerifier(fakeAuth(() => published).auth, new RevocationList());
    const underA = await token(a);
    const underB = await token(b);
    expect(await verifier.verify(underA)).toBeDefined();
    expect(await verifier.verify(underB)).toBeDefined();
    published = [b.jwk];
    await verifier.refreshKeys();
    expect(await verifier.verify(underA)).toBeUndefined();
    expect(await verifier.verify(underB)).toBeDefined();
  });

  it("a flood of unknown key ids causes at most one refresh per interval", async () => {
    const a = await keyPair("key_a");
    const stranger = await keyPair("key_stranger");
    const { auth, calls } = fakeAuth(() => [a.jwk]);
    const verifier = new BearerVerifier(auth, new RevocationList());
    await verifier.refreshKeys();
    const forged = await token(stranger);
    await Promise.all(Array.from({ length: 50 }, () => verifier.verify(forged)));
    expect(calls.getJwks).toBe(1);
  });

  it("an unreachable auth service during a refresh is a refusal (401), not a crash", async () => {
    const verifier = new BearerVerifier(
      { getJwks: () => Promise.reject(new Error("down")) } as unknown as AuthClient,
      new RevocationList(),
    );
    const k = await keyPair("key_1");
    expect(await verifier.verify(await token(k))).toBeUndefined();
  });
});
