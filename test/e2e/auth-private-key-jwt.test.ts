import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestStack, type TestStack } from "../support/services.js";
import { call, opsCliEnv, opsFor, requestToken, runOpsCli } from "../support/partner-api.js";
import { assertionBody, NO_RATE_LIMITS, partnerKey } from "../support/auth.js";

// private_key_jwt client authentication (RFC 7523 section 2.2, as SMART Backend Services use it):
// the operator registers a partner's public keys, the partner signs an assertion per token request,
// every failure is the one invalid_client of guarantee 5; and the discovery metadata that tells a
// client all of this. The service sits behind an ingress: the assertion's aud is TOKEN_ENDPOINT_URL.

const TOKEN_ENDPOINT = "https://partners.example/oauth/token";
let stack: TestStack;
let ops: ReturnType<typeof opsFor>;
let elder: string;

beforeAll(async () => {
  stack = await startTestStack({ ...NO_RATE_LIMITS, TOKEN_ENDPOINT_URL: TOKEN_ENDPOINT });
  ops = opsFor(stack.settings);
  elder = (await ops.info()).sandbox_elder_address as string;
});
afterAll(async () => {
  await stack?.stop();
});

const INVALID_CLIENT = { error: "invalid_client", error_description: "Client authentication failed." };

async function tokenWith(assertion: string, extra: Record<string, string> = {}) {
  const res = await requestToken(stack.baseUrl, assertionBody(assertion, extra));
  return { status: res.status, body: JSON.parse(res.text) as Record<string, unknown>, text: res.text };
}

/** A partner with a private_key_jwt test credential for this key. */
async function registered(key: Awaited<ReturnType<typeof partnerKey>>) {
  const partner = await ops.partnerCreate({ name: `Key Pair Lab ${key.alg}` });
  const credential = await ops.credentialCreate(partner.partner_id, "test", { jwksJson: JSON.stringify(key.jwks) });
  return { partner, clientId: credential.client_id as string, credential };
}

describe("private_key_jwt", () => {
  it.each(["RS384", "ES384", "ES256", "RS256"] as const)("an assertion signed with %s gets a token that works on /v1; the credential has no secret", async (alg) => {
    const key = await partnerKey(alg, `${alg.toLowerCase()}-1`);
    const { clientId, credential } = await registered(key);
    expect(credential).toEqual({ client_id: clientId, mode: "test", auth_method: "private_key_jwt" });
    const res = await tokenWith(await key.assertion(clientId, TOKEN_ENDPOINT), { scope: "connections:write" });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ token_type: "Bearer", scope: "connections:write" });
    const created = await call(stack.baseUrl, res.body.access_token as string, "POST", "/v1/connections", { elder });
    expect(created.status).toBe(202);
    // The client_id may ride along when it names the same client.
    expect((await tokenWith(await key.assertion(clientId, TOKEN_ENDPOINT), { client_id: clientId })).status).toBe(200);
  });

  it("every assertion failure is the same 400 invalid_client, byte for byte", async () => {
    const key = await partnerKey("ES384", "k1");
    const { partner, clientId } = await registered(key);
    const stranger = await partnerKey("ES384", "k1");
    const revokedKey = await partnerKey("RS384", "r1");
    const revoked = await registered(revokedKey);
    await ops.credentialRevoke(revoked.clientId);
    const suspendedKey = await partnerKey("ES256", "s1");
    const suspended = await registered(suspendedKey);
    await ops.partnerSetStatus(suspended.partner.partner_id, "suspended");
    const secretPartner = await ops.partnerCreate({ name: "Secret Holder" });

    const replayed = await key.assertion(clientId, TOKEN_ENDPOINT);
    expect((await tokenWith(replayed)).status).toBe(200);
    const now = Math.floor(Date.now() / 1000);
    const cases: [string, string, Record<string, string>?][] = [
      ["replayed jti", replayed],
      ["unknown kid", await key.assertion(clientId, TOKEN_ENDPOINT, { header: { kid: "k-unknown" } })],
      ["bad signature (another key under the right kid)", await stranger.assertion(clientId, TOKEN_ENDPOINT)],
      ["wrong aud (the issuer)", await key.assertion(clientId, "https://partners.example")],
      ["wrong aud (the gateway's own address)", await key.assertion(clientId, `${stack.baseUrl}/oauth/token`)],
      ["expired", await key.assertion(clientId, TOKEN_ENDPOINT, { claims: { exp: now - 1, iat: now - 120 } })],
      ["exp more than five minutes ahead", await key.assertion(clientId, TOKEN_ENDPOINT, { ttl: 3600 })],
      ["iss and sub another client", await key.assertion(revoked.clientId, TOKEN_ENDPOINT)],
      ["sub not the client", await key.assertion(clientId, TOKEN_ENDPOINT, { claims: { sub: "someone" } })],
      ["no jti", await key.assertion(clientId, TOKEN_ENDPOINT, { claims: { jti: undefined } })],
      ["unknown client", await key.assertion("cli_0000000000000000000000", TOKEN_ENDPOINT)],
      ["a client_id naming another client", await key.assertion(clientId, TOKEN_ENDPOINT), { client_id: revoked.clientId }],
      ["revoked credential", await revokedKey.assertion(revoked.clientId, TOKEN_ENDPOINT)],
      ["suspended partner", await suspendedKey.assertion(suspended.clientId, TOKEN_ENDPOINT)],
      ["a client-secret credential", await key.assertion(secretPartner.live.client_id, TOKEN_ENDPOINT)],
      ["malformed (not a JWS)", "not-a-jwt"],
      ["malformed (alg none)", `${Buffer.from('{"alg":"none","kid":"k1"}').toString("base64url")}.${replayed.split(".")[1]}.`],
      ["malformed (HS256 under the public key's kid)", `${Buffer.from('{"alg":"HS256","kid":"k1"}').toString("base64url")}.${replayed.split(".")[1]}.c2ln`],
    ];
    for (const [what, assertion, extra] of cases) {
      const res = await tokenWith(assertion, extra);
      expect({ what, status: res.status, text: res.text }).toEqual({ what, status: 400, text: JSON.stringify(INVALID_CLIENT) });
    }
    // The partner's standing credential still works, and a secret never opens a private_key_jwt credential.
    expect((await tokenWith(await key.assertion(clientId, TOKEN_ENDPOINT))).status).toBe(200);
    const bySecret = await requestToken(stack.baseUrl, { grant_type: "client_credentials", client_id: clientId, client_secret: secretPartner.live.client_secret });
    expect([bySecret.status, JSON.parse(bySecret.text)]).toEqual([400, INVALID_CLIENT]);
    expect(partner.partner_id).toMatch(/^ptr_/);
  });

  it("a set published at a URL: fetched at registration and when the partner rotates to a key of a new kid", async () => {
    const first = await partnerKey("RS384", "2026-11");
    let published: object = first.jwks;
    const server: Server = createServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(published)));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/.well-known/jwks.json`;
      const partner = await ops.partnerCreate({ name: "Published Keys Clinic" });
      const credential = await ops.credentialCreate(partner.partner_id, "live", { jwksUrl: url });
      expect(credential).toEqual({ client_id: expect.stringMatching(/^cli_/), mode: "live", auth_method: "private_key_jwt" });
      const clientId = credential.client_id as string;
      expect((await tokenWith(await first.assertion(clientId, TOKEN_ENDPOINT))).status).toBe(200);
      // Rotation: the partner publishes the new key beside the old one. The first assertion
      // naming the new kid makes auth fetch the set again (at most every 30 s per URL).
      const second = await partnerKey("ES384", "2026-12");
      published = { keys: [...first.jwks.keys, ...second.jwks.keys] };
      const deadline = Date.now() + 40_000;
      let status = 0;
      while (Date.now() < deadline && status !== 200) {
        status = (await tokenWith(await second.assertion(clientId, TOKEN_ENDPOINT))).status;
        if (status !== 200) await new Promise((r) => setTimeout(r, 1_000));
      }
      expect(status).toBe(200);
      expect((await tokenWith(await first.assertion(clientId, TOKEN_ENDPOINT))).status).toBe(200);
      // A URL that serves no usable set is refused at registration.
      published = { keys: [] };
      await expect(ops.credentialCreate(partner.partner_id, "live", { jwksUrl: url })).rejects.toThrow(/1 to 10 keys/);
    } finally {
      server.close();
    }
  }, 60_000);

  it("registration refuses private keys, bad sets, and both a set and a URL", async () => {
    const partner = await ops.partnerCreate({ name: "Careless Vendor" });
    const key = await partnerKey("ES256", "k");
    await expect(ops.credentialCreate(partner.partner_id, "live", { jwksJson: JSON.stringify({ keys: [{ ...key.publicJwk, d: "AAAA" }] }) })).rejects.toThrow(/private/);
    await expect(ops.credentialCreate(partner.partner_id, "live", { jwksJson: "{not json" })).rejects.toThrow(/not JSON/);
    await expect(ops.credentialCreate(partner.partner_id, "live", { jwksJson: JSON.stringify(key.jwks), jwksUrl: "https://keys.example/jwks" })).rejects.toThrow(/not both/);
  });

  it("operator CLI: credential create --jwks-file prints client_id, mode and auth_method, and no secret", async () => {
    const partner = await ops.partnerCreate({ name: "CLI Key Pair Pharmacy" });
    const key = await partnerKey("RS384", "cli-1");
    const file = join(tmpdir(), `jwks-${process.pid}-${Date.now()}.json`);
    writeFileSync(file, JSON.stringify(key.jwks));
    const run = await runOpsCli(opsCliEnv(stack.settings), ["credential", "create", partner.partner_id, "--mode", "live", "--jwks-file", file, "--json"]);
    expect(run.code).toBe(0);
    const printed = JSON.parse(run.stdout) as Record<string, unknown>;
    expect(printed).toEqual({ client_id: expect.stringMatching(/^cli_/), mode: "live", auth_method: "private_key_jwt" });
    expect((await tokenWith(await key.assertion(printed.client_id as string, TOKEN_ENDPOINT))).status).toBe(200);
    const missing = await runOpsCli(opsCliEnv(stack.settings), ["credential", "create", partner.partner_id, "--mode", "live", "--jwks-file", `${file}.absent`, "--json"]);
    expect([missing.code !== 0, missing.stdout, missing.stderr]).toEqual([true, "", expect.stringMatching(/jwks-file/)]);
  });
});

describe("discovery metadata", () => {
  it("RFC 8414 and SMART's smart-configuration name the token endpoint behind the ingress, the three methods and the four algorithms", async () => {
    const oauth = await call(stack.baseUrl, undefined, "GET", "/.well-known/oauth-authorization-server");
    expect(oauth.status).toBe(200);
    expect(oauth.json).toMatchObject({
      issuer: "https://partners.example",
      token_endpoint: TOKEN_ENDPOINT,
      grant_types_supported: ["client_credentials"],
      token_endpoint_auth_methods_supported: ["client_secret_basic", "client_secret_post", "private_key_jwt"],
      token_endpoint_auth_signing_alg_values_supported: expect.arrayContaining(["RS384", "ES384", "ES256", "RS256"]),
      scopes_supported: ["connections:write", "files:write"],
    });
    const smart = await call(stack.baseUrl, undefined, "GET", "/.well-known/smart-configuration");
    expect(smart.status).toBe(200);
    expect(smart.json).toMatchObject({
      token_endpoint: TOKEN_ENDPOINT,
      token_endpoint_auth_methods_supported: expect.arrayContaining(["private_key_jwt"]),
      capabilities: expect.arrayContaining(["client-confidential-asymmetric"]),
    });
  });
});
