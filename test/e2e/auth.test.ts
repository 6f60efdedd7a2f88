import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createHmac } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { startAuthService } from "@pi/auth";
import { AUDIT_BOOKKEEPING } from "@pi/common/store/audit-trail";
import { clientsFor } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { emptyOutbox } from "@pi/common/store/persistence";
import type { RunningService } from "@pi/common/runtime/run-service";
import { startWarmGateway } from "@pi/gateway";
import { decodeJwt as decodeJwtPayload, generateKeyPair } from "jose";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common/store/mongo";
import {
  assertionBody,
  decodeJwt,
  NO_RATE_LIMITS,
  partnerKey,
  resign,
  signingKey,
  withAuthDb,
} from "../support/auth.js";
import {
  accessToken,
  basicAuthorization,
  call,
  connectionRequestStatus,
  opsCliEnv,
  opsFor,
  requestToken,
  runOpsCli,
} from "../support/partner-api.js";
import { as, sharedTestStack, startTestStack, stopSharedStacks, type TestStack } from "../support/services.js";

// Authentication end to end: the token endpoint row by row, HTTP Basic and private_key_jwt client
// authentication, bearer checks (401/403), secrets never logged or stored in clear, the audit trail,
// revocation on every gateway and key rotation. Tests on the stack without rate limits share one
// (sharedTestStack); the others start the stack their settings need. The token endpoint's and the
// edge's parsing of bad input is unit-tested through the in-memory gateway (services/gateway/test).

afterAll(stopSharedStacks);

describe("auth token endpoint", () => {
  // POST /oauth/token, row by row of the spec's status table (RFC 6749 sections 4.4, 5.1, 5.2): the
  // rows auth answers. The rows the gateway answers alone (invalid_request, unsupported_grant_type,
  // 405): services/gateway/test/edge-token-endpoint.test.ts.

  let stack: TestStack;
  let ops: ReturnType<typeof opsFor>;
  let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;

  beforeAll(async () => {
    stack = await sharedTestStack(NO_RATE_LIMITS);
    ops = opsFor(stack.settings);
    partner = await ops.partnerCreate({ name: "Token Endpoint Pharmacy" });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const good = () => ({
    grant_type: "client_credentials",
    client_id: partner.live.client_id,
    client_secret: partner.live.client_secret,
  });

  function expectOAuthError(res: { status: number; headers: Headers; text: string }, error: string) {
    expect(res.status).toBe(400);
    const body = JSON.parse(res.text) as Record<string, unknown>;
    expect(body.error).toBe(error);
    expect(Object.keys(body).sort()).toEqual(["error", "error_description"]);
    expect(typeof body.error_description).toBe("string");
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  }

  describe("token endpoint row 200: credentials valid", () => {
    it.each(["form", "json"] as const)(
      "200 with a %s body: exactly the token response fields, never cached",
      async (encoding) => {
        const res = await requestToken(stack.baseUrl, good(), encoding);
        expect(res.status).toBe(200);
        expect(res.headers.get("cache-control")).toBe("no-store");
        expect(res.headers.get("pragma")).toBe("no-cache");
        expect(res.headers.get("content-type")).toMatch(/^application\/json/);
        const body = JSON.parse(res.text) as Record<string, unknown>;
        expect(Object.keys(body).sort()).toEqual(["access_token", "expires_in", "scope", "token_type"]);
        expect(body).toMatchObject({ token_type: "Bearer", expires_in: 900, scope: "connections:write files:write" });
        expect(body.access_token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
      },
    );

    it("the JWT carries partner, credential, mode, scopes, id, issue and expiry times and the audience", async () => {
      const askedAt = Date.now();
      const res = await requestToken(stack.baseUrl, good());
      const answeredAt = Date.now();
      const { header, payload } = decodeJwt((JSON.parse(res.text) as { access_token: string }).access_token);
      expect(header).toMatchObject({ alg: "ES256", typ: "at+jwt" });
      expect(header.kid).toMatch(/^key_/);
      expect(payload).toMatchObject({
        sub: partner.partner_id,
        client_id: partner.live.client_id,
        mode: "live",
        scope: "connections:write files:write",
        aud: "partner-api",
        iss: "pi-auth",
      });
      expect(payload.jti).toMatch(/^tok_/);
      // Valid for at least expires_in (900 s) from the moment it was minted, and under a second more.
      const [iat, exp] = [(payload.iat as number) * 1000, (payload.exp as number) * 1000];
      expect(iat).toBeGreaterThanOrEqual(Math.floor(askedAt / 1000) * 1000);
      expect(iat).toBeLessThanOrEqual(answeredAt);
      expect(exp).toBeGreaterThanOrEqual(askedAt + 900_000);
      expect(exp).toBeLessThan(answeredAt + 901_000);
    });

    it("a test credential's token says test mode; the request cannot choose it", async () => {
      const res = await requestToken(stack.baseUrl, {
        grant_type: "client_credentials",
        client_id: partner.test.client_id,
        client_secret: partner.test.client_secret,
        mode: "live",
      });
      expect(res.status).toBe(200);
      expect(decodeJwt((JSON.parse(res.text) as { access_token: string }).access_token).payload.mode).toBe("test");
      const live = await requestToken(stack.baseUrl, { ...good(), mode: "test" });
      expect(decodeJwt((JSON.parse(live.text) as { access_token: string }).access_token).payload.mode).toBe("live");
    });

    it("unrecognised parameters are ignored (RFC 6749 section 3.2)", async () => {
      const res = await requestToken(stack.baseUrl, { ...good(), audience: "something", resource: "x" });
      expect(res.status).toBe(200);
    });
  });

  describe("token endpoint scopes: subset grants, omitted grants every allowed Ring 1 scope, invalid_scope", () => {
    it.each([
      ["files:write", "files:write"],
      ["connections:write", "connections:write"],
      ["files:write connections:write", "connections:write files:write"],
      ["connections:write  connections:write", "connections:write"],
    ])("scope %j grants %j, and the token carries exactly that", async (scope, granted) => {
      for (const encoding of ["form", "json"] as const) {
        const res = await requestToken(stack.baseUrl, { ...good(), scope }, encoding);
        expect(res.status).toBe(200);
        const body = JSON.parse(res.text) as { scope: string; access_token: string };
        expect(body.scope).toBe(granted);
        expect(decodeJwt(body.access_token).payload.scope).toBe(granted);
      }
    });

    it("omitted scope grants every Ring 1 scope", async () => {
      const res = await requestToken(stack.baseUrl, good());
      expect((JSON.parse(res.text) as { scope: string }).scope).toBe("connections:write files:write");
    });

    it.each(["admin", "files:write admin", "files:read", "connections:write,files:write", "FILES:WRITE"])(
      "invalid_scope for %j, a scope outside the allowed set",
      async (scope) => {
        expectOAuthError(await requestToken(stack.baseUrl, { ...good(), scope }), "invalid_scope");
        expectOAuthError(await requestToken(stack.baseUrl, { ...good(), scope }, "json"), "invalid_scope");
      },
    );

    it("a partner created with --scopes files:write is granted only that when scope is omitted, and invalid_scope for connections:write", async () => {
      const narrow = await ops.partnerCreate({ name: "Files Only Lab", scopes: "files:write" });
      const creds = {
        grant_type: "client_credentials",
        client_id: narrow.live.client_id,
        client_secret: narrow.live.client_secret,
      };
      const omitted = await requestToken(stack.baseUrl, creds);
      expect(omitted.status).toBe(200);
      const body = JSON.parse(omitted.text) as { scope: string; access_token: string };
      expect(body.scope).toBe("files:write");
      expectOAuthError(await requestToken(stack.baseUrl, { ...creds, scope: "connections:write" }), "invalid_scope");
      expectOAuthError(
        await requestToken(stack.baseUrl, { ...creds, scope: "files:write connections:write" }),
        "invalid_scope",
      );
      // ...and such a token cannot use the connection routes.
      const res = await call(stack.baseUrl, body.access_token, "POST", "/v1/connections", {
        elder: `a.b.c@${stack.settings.ADDRESS_DOMAIN}`,
      });
      expect(res.status).toBe(403);
    });

    it("a bad secret with a bad scope is invalid_client, not invalid_scope: scopes cannot be probed without the secret", async () => {
      expectOAuthError(
        await requestToken(stack.baseUrl, { ...good(), client_secret: "sk_live_wrong", scope: "admin" }),
        "invalid_client",
      );
    });
  });

  describe("token endpoint row 400 invalid_client", () => {
    it("unknown client and bad secret, in both encodings", async () => {
      for (const encoding of ["form", "json"] as const) {
        expectOAuthError(
          await requestToken(stack.baseUrl, { ...good(), client_id: "cli_doesnotexist" }, encoding),
          "invalid_client",
        );
        expectOAuthError(
          await requestToken(stack.baseUrl, { ...good(), client_secret: `${partner.live.client_secret}x` }, encoding),
          "invalid_client",
        );
        // The other credential's secret is a bad secret too.
        expectOAuthError(
          await requestToken(stack.baseUrl, { ...good(), client_secret: partner.test.client_secret }, encoding),
          "invalid_client",
        );
      }
    });
  });
});

describe("auth basic", () => {
  // HTTP Basic client authentication at POST /oauth/token (RFC 6749 section 2.3.1), beside the body
  // fields: docs/authentication.md, "Client authentication". The header's parsing, both methods at
  // once and the per-IP limit counting both: services/gateway/test/edge-token-endpoint.test.ts.

  let stack: TestStack;
  let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;

  beforeAll(async () => {
    stack = await sharedTestStack(NO_RATE_LIMITS);
    partner = await opsFor(stack.settings).partnerCreate({ name: "Basic Auth Lab" });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const grant = { grant_type: "client_credentials" };
  const basic = () => ({ authorization: basicAuthorization(partner.live.client_id, partner.live.client_secret) });

  describe("token endpoint: HTTP Basic client authentication", () => {
    it.each(["form", "json"] as const)(
      "200 with a Basic header and a %s body of grant_type alone; the token works on /v1",
      async (encoding) => {
        const res = await requestToken(stack.baseUrl, grant, encoding, basic());
        expect(res.status).toBe(200);
        const body = JSON.parse(res.text) as { access_token: string; scope: string };
        expect(body.scope).toBe("connections:write files:write");
        const read = await call(
          stack.baseUrl,
          body.access_token,
          "GET",
          "/v1/connections/con_00000000000000000000000000",
        );
        expect(read.status).toBe(404);
      },
    );

    it("scope narrowing works the same with Basic", async () => {
      const res = await requestToken(stack.baseUrl, { ...grant, scope: "files:write" }, "form", basic());
      expect(JSON.parse(res.text)).toMatchObject({ scope: "files:write" });
    });

    it("a repeated client_id in the body naming the same client is accepted", async () => {
      expect(
        (await requestToken(stack.baseUrl, { ...grant, client_id: partner.live.client_id }, "form", basic())).status,
      ).toBe(200);
    });

    it("a wrong secret by Basic is the body method's invalid_client, byte for byte", async () => {
      const byBasic = await requestToken(stack.baseUrl, grant, "form", {
        authorization: basicAuthorization(partner.live.client_id, "sk_live_wrong"),
      });
      const byBody = await requestToken(stack.baseUrl, {
        ...grant,
        client_id: partner.live.client_id,
        client_secret: "sk_live_wrong",
      });
      expect(byBasic.status).toBe(400);
      expect(byBasic.text).toBe(byBody.text);
      expect(byBasic.headers.get("www-authenticate")).toBeNull();
    });
  });
});

describe("auth private key jwt", () => {
  // private_key_jwt client authentication (RFC 7523 section 2.2, as SMART Backend Services use it):
  // the operator registers a partner's public keys, the partner signs an assertion per token request,
  // every failure is the one invalid_client of guarantee 5; and the discovery metadata that tells a
  // client all of this. The service sits behind an ingress: the assertion's aud is TOKEN_ENDPOINT_URL.

  const TOKEN_ENDPOINT = "https://partners.example/oauth/token";
  /** The least time between two fetches of a JWK Set URL in this stack (30 s by default: not waited out here). */
  const JWKS_URL_REFETCH_COOLDOWN_MS = 2_000;
  let stack: TestStack;
  let ops: ReturnType<typeof opsFor>;
  let elder: string;

  beforeAll(async () => {
    stack = await startTestStack(
      { ...NO_RATE_LIMITS, TOKEN_ENDPOINT_URL: TOKEN_ENDPOINT },
      { auth: { jwksUrlRefetchCooldownMs: JWKS_URL_REFETCH_COOLDOWN_MS } },
    );
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
    it.each(["RS384", "ES384", "ES256", "RS256"] as const)(
      "an assertion signed with %s gets a token that works on /v1; the credential has no secret",
      async (alg) => {
        const key = await partnerKey(alg, `${alg.toLowerCase()}-1`);
        const { clientId, credential } = await registered(key);
        expect(credential).toEqual({ client_id: clientId, mode: "test", auth_method: "private_key_jwt" });
        const res = await tokenWith(await key.assertion(clientId, TOKEN_ENDPOINT), { scope: "connections:write" });
        expect(res.status).toBe(200);
        expect(res.body).toMatchObject({ token_type: "Bearer", scope: "connections:write" });
        const created = await call(stack.baseUrl, res.body.access_token as string, "POST", "/v1/connections", {
          elder,
        });
        expect(created.status).toBe(202);
        // The client_id may ride along when it names the same client.
        expect((await tokenWith(await key.assertion(clientId, TOKEN_ENDPOINT), { client_id: clientId })).status).toBe(
          200,
        );
      },
    );

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
        [
          "a client_id naming another client",
          await key.assertion(clientId, TOKEN_ENDPOINT),
          { client_id: revoked.clientId },
        ],
        ["revoked credential", await revokedKey.assertion(revoked.clientId, TOKEN_ENDPOINT)],
        ["suspended partner", await suspendedKey.assertion(suspended.clientId, TOKEN_ENDPOINT)],
        ["a client-secret credential", await key.assertion(secretPartner.live.client_id, TOKEN_ENDPOINT)],
        ["malformed (not a JWS)", "not-a-jwt"],
        [
          "malformed (alg none)",
          `${Buffer.from('{"alg":"none","kid":"k1"}').toString("base64url")}.${replayed.split(".")[1]}.`,
        ],
        [
          "malformed (HS256 under the public key's kid)",
          `${Buffer.from('{"alg":"HS256","kid":"k1"}').toString("base64url")}.${replayed.split(".")[1]}.c2ln`,
        ],
      ];
      for (const [what, assertion, extra] of cases) {
        const res = await tokenWith(assertion, extra);
        expect({ what, status: res.status, text: res.text }).toEqual({
          what,
          status: 400,
          text: JSON.stringify(INVALID_CLIENT),
        });
      }
      // The partner's standing credential still works, and a secret never opens a private_key_jwt credential.
      expect((await tokenWith(await key.assertion(clientId, TOKEN_ENDPOINT))).status).toBe(200);
      const bySecret = await requestToken(stack.baseUrl, {
        grant_type: "client_credentials",
        client_id: clientId,
        client_secret: secretPartner.live.client_secret,
      });
      expect([bySecret.status, JSON.parse(bySecret.text)]).toEqual([400, INVALID_CLIENT]);
      expect(partner.partner_id).toMatch(/^ptr_/);
    });

    it("a set published at a URL: fetched at registration and when the partner rotates to a key of a new kid", async () => {
      const first = await partnerKey("RS384", "2026-11");
      let published: object = first.jwks;
      const server: Server = createServer((_req, res) =>
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(published)),
      );
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      try {
        const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/.well-known/jwks.json`;
        const partner = await ops.partnerCreate({ name: "Published Keys Clinic" });
        const credential = await ops.credentialCreate(partner.partner_id, "live", { jwksUrl: url });
        expect(credential).toEqual({
          client_id: expect.stringMatching(/^cli_/),
          mode: "live",
          auth_method: "private_key_jwt",
        });
        const clientId = credential.client_id as string;
        expect((await tokenWith(await first.assertion(clientId, TOKEN_ENDPOINT))).status).toBe(200);
        // Rotation: the partner publishes the new key beside the old one. The first assertion
        // naming the new kid makes auth fetch the set again (at most once per cooldown per URL).
        const second = await partnerKey("ES384", "2026-12");
        published = { keys: [...first.jwks.keys, ...second.jwks.keys] };
        const deadline = Date.now() + JWKS_URL_REFETCH_COOLDOWN_MS + 10_000;
        let status = 0;
        while (Date.now() < deadline && status !== 200) {
          status = (await tokenWith(await second.assertion(clientId, TOKEN_ENDPOINT))).status;
          if (status !== 200) await new Promise((r) => setTimeout(r, 250));
        }
        expect(status).toBe(200);
        expect((await tokenWith(await first.assertion(clientId, TOKEN_ENDPOINT))).status).toBe(200);
        // A URL that serves no usable set is refused at registration.
        published = { keys: [] };
        await expect(ops.credentialCreate(partner.partner_id, "live", { jwksUrl: url })).rejects.toThrow(
          /1 to 10 keys/,
        );
      } finally {
        server.close();
      }
    }, 60_000);

    it("registration refuses private keys, bad sets, and both a set and a URL", async () => {
      const partner = await ops.partnerCreate({ name: "Careless Vendor" });
      const key = await partnerKey("ES256", "k");
      await expect(
        ops.credentialCreate(partner.partner_id, "live", {
          jwksJson: JSON.stringify({ keys: [{ ...key.publicJwk, d: "AAAA" }] }),
        }),
      ).rejects.toThrow(/private/);
      await expect(ops.credentialCreate(partner.partner_id, "live", { jwksJson: "{not json" })).rejects.toThrow(
        /not JSON/,
      );
      await expect(
        ops.credentialCreate(partner.partner_id, "live", {
          jwksJson: JSON.stringify(key.jwks),
          jwksUrl: "https://keys.example/jwks",
        }),
      ).rejects.toThrow(/not both/);
    });

    it("operator CLI: credential create --jwks-file prints client_id, mode and auth_method, and no secret", async () => {
      const partner = await ops.partnerCreate({ name: "CLI Key Pair Pharmacy" });
      const key = await partnerKey("RS384", "cli-1");
      const file = join(tmpdir(), `jwks-${process.pid}-${Date.now()}.json`);
      writeFileSync(file, JSON.stringify(key.jwks));
      const run = await runOpsCli(opsCliEnv(stack.settings), [
        "credential",
        "create",
        partner.partner_id,
        "--mode",
        "live",
        "--jwks-file",
        file,
        "--json",
      ]);
      expect(run.code).toBe(0);
      const printed = JSON.parse(run.stdout) as Record<string, unknown>;
      expect(printed).toEqual({
        client_id: expect.stringMatching(/^cli_/),
        mode: "live",
        auth_method: "private_key_jwt",
      });
      expect((await tokenWith(await key.assertion(printed.client_id as string, TOKEN_ENDPOINT))).status).toBe(200);
      const missing = await runOpsCli(opsCliEnv(stack.settings), [
        "credential",
        "create",
        partner.partner_id,
        "--mode",
        "live",
        "--jwks-file",
        `${file}.absent`,
        "--json",
      ]);
      expect([missing.code !== 0, missing.stdout, missing.stderr]).toEqual([
        true,
        "",
        expect.stringMatching(/jwks-file/),
      ]);
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
});

describe("auth bearer", () => {
  // Authentication, item 5: a missing, malformed, invalid, expired or revoked bearer gives 401 with
  // code unauthorized, the one body whatever the cause. Item 4: a valid token without the route's
  // scope gets 403 insufficient_scope. Malformed headers and tokens that are not the deployment's:
  // services/gateway/test/edge-bearer.test.ts; here the causes that need its keys and its auth service.

  let stack: TestStack;
  let shortLived: TestStack;
  let ops: ReturnType<typeof opsFor>;
  let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;
  let token: string;
  let elder: string;

  beforeAll(async () => {
    stack = await sharedTestStack(NO_RATE_LIMITS);
    shortLived = await startTestStack({ ...NO_RATE_LIMITS, ACCESS_TOKEN_TTL_SECONDS: "1" });
    ops = opsFor(stack.settings);
    partner = await ops.partnerCreate({ name: "Bearer Clinic" });
    token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    elder = (await ops.elderCreate()).address;
  });
  afterAll(async () => {
    await Promise.all([stack?.stop(), shortLived?.stop()]);
  });

  /** A /v1 call; `body` null sends none (default: a valid connection request). */
  async function send(
    baseUrl: string,
    authorization: string | undefined,
    method = "POST",
    path = "/v1/connections",
    body: unknown = { elder },
  ) {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: {
        ...(authorization !== undefined ? { authorization } : {}),
        ...(body !== null ? { "content-type": "application/json" } : {}),
      },
      body: body !== null ? JSON.stringify(body) : undefined,
    });
    return {
      status: res.status,
      wwwAuthenticate: res.headers.get("www-authenticate"),
      contentType: res.headers.get("content-type"),
      text: await res.text(),
    };
  }

  const UNAUTHORIZED = {
    error: {
      type: "authentication_error",
      code: "unauthorized",
      message: "The bearer token is missing, malformed, invalid, expired or revoked.",
    },
  };

  function expectUnauthorized(res: Awaited<ReturnType<typeof send>>, reference?: Awaited<ReturnType<typeof send>>) {
    expect(res.status).toBe(401);
    expect(JSON.parse(res.text)).toEqual(UNAUTHORIZED);
    expect(res.wwwAuthenticate).toBe('Bearer realm="partner-api"');
    if (reference) expect(res).toEqual(reference);
  }

  describe("401 unauthorized: every cause gives the identical body and headers", () => {
    let reference: Awaited<ReturnType<typeof send>>;
    beforeAll(async () => {
      reference = await send(stack.baseUrl, null);
    });

    it("the valid token itself is accepted (the control)", async () => {
      expect((await send(stack.baseUrl, `Bearer ${token}`)).status).toBe(202);
      expect((await send(stack.baseUrl, `bearer ${token}`)).status).toBe(202); // RFC 6750: the scheme is case-insensitive
    });

    it("401 cause: missing Authorization header", () => {
      expectUnauthorized(reference);
    });

    it("401 cause: bad signature (signed by another key under the real key id)", async () => {
      const { privateKey } = await generateKeyPair("ES256");
      const real = await signingKey(stack.settings);
      const forged = await resign(stack.settings, token, {}, {}, { kid: real.kid, key: privateKey as CryptoKey });
      expectUnauthorized(await send(stack.baseUrl, `Bearer ${forged}`), reference);
    });

    it("401 cause: a key id the auth service never published", async () => {
      const { privateKey } = await generateKeyPair("ES256");
      const forged = await resign(stack.settings, token, {}, {}, { kid: "key_unknown", key: privateKey as CryptoKey });
      expectUnauthorized(await send(stack.baseUrl, `Bearer ${forged}`), reference);
    });

    it("a token re-signed with the real key and no change is accepted (so the cases below test one change each)", async () => {
      expect((await send(stack.baseUrl, `Bearer ${await resign(stack.settings, token, {})}`)).status).toBe(202);
    });

    it.each([
      ["wrong audience", { aud: "another-api" }, {}],
      ["no audience", { aud: undefined }, {}],
      ["wrong issuer", { iss: "someone-else" }, {}],
      ["no expiry", { exp: undefined }, {}],
      ["expired (exp in the past)", { exp: Math.floor(Date.now() / 1000) - 5 }, {}],
      ["not yet valid", { nbf: Math.floor(Date.now() / 1000) + 600 }, {}],
      ["no subject", { sub: undefined }, {}],
      ["an unknown mode", { mode: "admin" }, {}],
      ["scope not a string", { scope: ["connections:write"] }, {}],
      ["wrong token type", {}, { typ: "JWT" }],
    ])("401 cause: a validly signed token with %s", async (_what, claims, header) => {
      expectUnauthorized(
        await send(stack.baseUrl, `Bearer ${await resign(stack.settings, token, claims, header)}`),
        reference,
      );
    });

    it("401 cause: a token from another deployment (another stack's key and audience alike)", async () => {
      const other = opsFor(shortLived.settings);
      const p = await other.partnerCreate({ name: "Elsewhere" });
      const foreign = await accessToken(shortLived.baseUrl, p.live.client_id, p.live.client_secret);
      expectUnauthorized(await send(stack.baseUrl, `Bearer ${foreign}`), reference);
    });

    it("401 cause: expired, in a stack with ACCESS_TOKEN_TTL_SECONDS=1", async () => {
      const shortOps = opsFor(shortLived.settings);
      const p = await shortOps.partnerCreate({ name: "Short Lived Lab" });
      const shortElder = (await shortOps.elderCreate()).address;
      const mintedAt = Date.now();
      const tokenRes = await fetch(`${shortLived.baseUrl}/oauth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "client_credentials",
          client_id: p.live.client_id,
          client_secret: p.live.client_secret,
        }),
      });
      const body = (await tokenRes.json()) as { access_token: string; expires_in: number };
      expect(body.expires_in).toBe(1);
      const { exp } = decodeJwtPayload(body.access_token);
      // Accepted for at least expires_in from the moment it was asked for...
      expect(exp! * 1000 - mintedAt).toBeGreaterThanOrEqual(1000);
      const fresh = await send(shortLived.baseUrl, `Bearer ${body.access_token}`, "POST", "/v1/connections", {
        elder: shortElder,
      });
      if (Date.now() < exp! * 1000) expect(fresh.status).toBe(202);
      // ...and refused, with the one 401, once its exp has passed.
      await new Promise((r) => setTimeout(r, Math.max(0, exp! * 1000 - Date.now()) + 100));
      expectUnauthorized(
        await send(shortLived.baseUrl, `Bearer ${body.access_token}`, "POST", "/v1/connections", { elder: shortElder }),
        reference,
      );
    });

    it("401 cause: revoked credential", async () => {
      const p = await ops.partnerCreate({ name: "Revoked Bearer Clinic" });
      const t = await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret);
      expect((await send(stack.baseUrl, `Bearer ${t}`)).status).toBe(202);
      await ops.credentialRevoke(p.live.client_id);
      expectUnauthorized(await send(stack.baseUrl, `Bearer ${t}`), reference);
    });

    it("401 cause: suspended partner (live and test tokens alike)", async () => {
      const p = await ops.partnerCreate({ name: "Suspended Bearer Clinic" });
      const live = await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret);
      const test = await accessToken(stack.baseUrl, p.test.client_id, p.test.client_secret);
      await ops.partnerSetStatus(p.partner_id, "suspended");
      expectUnauthorized(await send(stack.baseUrl, `Bearer ${live}`), reference);
      expectUnauthorized(await send(stack.baseUrl, `Bearer ${test}`), reference);
    });
  });

  describe("403 insufficient_scope", () => {
    const INSUFFICIENT = {
      error: {
        type: "permission_error",
        code: "insufficient_scope",
        message: "The access token lacks the scope this operation requires.",
      },
    };
    let filesOnly: string;
    let connectionId: string;
    beforeAll(async () => {
      filesOnly = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret, "files:write");
      const created = await send(stack.baseUrl, `Bearer ${token}`);
      connectionId = (JSON.parse(created.text) as { id: string }).id;
    });

    it("insufficient_scope: POST /v1/connections needs connections:write", async () => {
      const res = await send(stack.baseUrl, `Bearer ${filesOnly}`);
      expect(res.status).toBe(403);
      expect(JSON.parse(res.text)).toEqual(INSUFFICIENT);
    });

    it("insufficient_scope: GET /v1/connections/{id} needs connections:write", async () => {
      const res = await send(stack.baseUrl, `Bearer ${filesOnly}`, "GET", `/v1/connections/${connectionId}`, null);
      expect(res.status).toBe(403);
      expect(JSON.parse(res.text)).toEqual(INSUFFICIENT);
      expect(
        (await send(stack.baseUrl, `Bearer ${token}`, "GET", `/v1/connections/${connectionId}`, null)).status,
      ).toBe(200);
    });

    it("insufficient_scope: DELETE /v1/connections/{id} needs connections:write", async () => {
      const res = await send(stack.baseUrl, `Bearer ${filesOnly}`, "DELETE", `/v1/connections/${connectionId}`, null);
      expect(res.status).toBe(403);
      expect(JSON.parse(res.text)).toEqual(INSUFFICIENT);
    });

    it("insufficient_scope is checked before the body: a files-only token with a bad body still gets 403", async () => {
      const res = await send(stack.baseUrl, `Bearer ${filesOnly}`, "POST", "/v1/connections", { nonsense: 1 });
      expect(res.status).toBe(403);
    });

    it("insufficient_scope: POST /v1/files needs files:write (checked before the upload is read)", async () => {
      const connectionsOnly = await accessToken(
        stack.baseUrl,
        partner.live.client_id,
        partner.live.client_secret,
        "connections:write",
      );
      const form = new FormData();
      form.append("elder", elder);
      form.append("file", new Blob(["hello"], { type: "text/plain" }), "note.txt");
      const res = await fetch(`${stack.baseUrl}/v1/files`, {
        method: "POST",
        headers: { authorization: `Bearer ${connectionsOnly}` },
        body: form,
      });
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual(INSUFFICIENT);
    });

    it("insufficient_scope: GET /v1/files/{id} needs files:write", async () => {
      const connectionsOnly = await accessToken(
        stack.baseUrl,
        partner.live.client_id,
        partner.live.client_secret,
        "connections:write",
      );
      const res = await send(stack.baseUrl, `Bearer ${connectionsOnly}`, "GET", "/v1/files/file_doesnotexist", null);
      expect(res.status).toBe(403);
      expect(JSON.parse(res.text)).toEqual(INSUFFICIENT);
    });

    it("401 comes before 403: a bad bearer on the files routes is unauthorized", async () => {
      const res = await send(stack.baseUrl, "Bearer nope", "GET", "/v1/files/file_doesnotexist", null);
      expect(res.status).toBe(401);
    });

    it("a connections-only token is enough for the connection routes", async () => {
      const connectionsOnly = await accessToken(
        stack.baseUrl,
        partner.live.client_id,
        partner.live.client_secret,
        "connections:write",
      );
      expect((await send(stack.baseUrl, `Bearer ${connectionsOnly}`)).status).toBe(202);
    });
  });
});

describe("auth secrets", () => {
  // Operator contract: "A secret is shown once, at creation, and stored only hashed." Secrets never
  // reach a log line, at any level.

  const logLines: string[] = [];
  let stack: TestStack;
  let ops: ReturnType<typeof opsFor>;

  beforeAll(async () => {
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logLines.push(...chunk.toString().split("\n").filter(Boolean));
        done();
      },
    });
    stack = await startTestStack({ ...NO_RATE_LIMITS, LOG_LEVEL: "trace" }, { logDestination: sink });
    ops = opsFor(stack.settings);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  describe("secrets never logged", () => {
    it("secrets never logged: partner create, token requests (good and bad), bearer calls, revocation; at trace level", async () => {
      const before = logLines.length;
      const partner = await ops.partnerCreate({ name: "Logged Clinic", webhookUrl: "http://127.0.0.1:9/hook" });
      const extra = await ops.credentialCreate(partner.partner_id, "test");
      const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      await requestToken(
        stack.baseUrl,
        {
          grant_type: "client_credentials",
          client_id: partner.live.client_id,
          client_secret: partner.live.client_secret,
        },
        "json",
      );
      await requestToken(stack.baseUrl, {
        grant_type: "client_credentials",
        client_id: partner.test.client_id,
        client_secret: `${partner.test.client_secret}x`,
      });
      await requestToken(stack.baseUrl, {
        grant_type: "client_credentials",
        client_id: "cli_unknown",
        client_secret: extra.client_secret,
      });
      const elder = (await ops.elderCreate()).address;
      for (const auth of [`Bearer ${token}`, `Bearer ${token}x`]) {
        await fetch(`${stack.baseUrl}/v1/connections`, {
          method: "POST",
          headers: { authorization: auth, "content-type": "application/json" },
          body: JSON.stringify({ elder }),
        });
      }
      await ops.credentialRevoke(partner.live.client_id);
      // The last act's line (written once every gateway confirmed the revocation) closes the capture.
      for (
        const deadline = Date.now() + 10_000;
        !logLines.some((l) => l.includes("credential revoked") && l.includes(partner.live.client_id)) &&
        Date.now() < deadline;
      ) {
        await new Promise((r) => setTimeout(r, 20));
      }

      const lines = logLines.slice(before);
      // The capture works: the gateway's access log lines of these requests are there.
      expect(lines.some((l) => l.includes('"path":"/oauth/token"'))).toBe(true);
      expect(lines.some((l) => l.includes("partner created"))).toBe(true);
      for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();

      const secrets = {
        "live client secret": partner.live.client_secret,
        "test client secret": partner.test.client_secret,
        "created credential's secret": extra.client_secret,
        "signing secret": partner.signing_secret,
        "access token": token,
        "access token signature": token.split(".")[2]!,
        "live secret's random part": partner.live.client_secret.replace(/^sk_live_/, ""),
      };
      for (const [what, secret] of Object.entries(secrets)) {
        const leaking = lines.filter((l) => l.includes(secret));
        expect({ what, leaking }).toEqual({ what, leaking: [] });
      }
    });
  });

  describe("client secrets stored only hashed", () => {
    it("client secrets stored only hashed: the auth database holds the peppered HMAC, and no secret in any form", async () => {
      const partner = await ops.partnerCreate({ name: "Stored Clinic" });
      const extra = await ops.credentialCreate(partner.partner_id, "live");
      const dump = await withAuthDb(stack.settings, async (db) => {
        const out: Record<string, unknown[]> = {};
        for (const c of await db.listCollections().toArray())
          out[c.name] = await db.collection(c.name).find().toArray();
        return out;
      });
      const credentials = dump.credentials as { _id: string; secretHash: string }[];
      const pepper = stack.settings.CREDENTIAL_PEPPER!;
      for (const [clientId, secret] of [
        [partner.live.client_id, partner.live.client_secret],
        [partner.test.client_id, partner.test.client_secret],
        [extra.client_id, extra.client_secret],
      ] as const) {
        const doc = credentials.find((c) => c._id === clientId)!;
        expect(doc.secretHash).toBe(createHmac("sha256", pepper).update(secret).digest("hex"));
        // Besides its own fields, a credential carries only the bookkeeping of its outboxes: events
        // (services/common/src/store/persistence.ts) and audit records (store/audit.ts).
        const outboxFields: string[] = [...Object.keys(emptyOutbox()), ...AUDIT_BOOKKEEPING];
        expect(
          Object.keys(doc)
            .filter((k) => !outboxFields.includes(k))
            .sort(),
        ).toEqual(["_id", "createdAt", "mode", "partnerId", "pepperId", "secretHash", "status"]);
        // The id of the pepper that made the hash, so a new pepper can be introduced later.
        expect((doc as { pepperId?: string }).pepperId).toBe("p1");
      }
      const everything = JSON.stringify(dump);
      for (const secret of [
        partner.live.client_secret,
        partner.test.client_secret,
        extra.client_secret,
        partner.signing_secret,
      ]) {
        expect(everything.includes(secret)).toBe(false);
        // The random part alone, without its prefix (sk_live_, sk_test_, whsec_); it may contain "_" itself.
        expect(everything.includes(secret.replace(/^(sk_live|sk_test|whsec)_/, ""))).toBe(false);
      }
      // The signing secret must be usable later (webhook signatures), so it is sealed, not hashed:
      // encrypted under its own data key, wrapped by the KEK k1 of DATA_KEYS, which the database does
      // not hold; the pepper keys hashes only.
      const stored = (dump.partners as { _id: string; sealedSigningSecret: string }[]).find(
        (p) => p._id === partner.partner_id,
      )!;
      expect(stored.sealedSigningSecret).toMatch(/^v2\.k1\./);
      expect(everything.includes(pepper)).toBe(false);
      for (const kek of stack.settings.DATA_KEYS!.split(","))
        expect(everything.includes(kek.split(":")[1]!)).toBe(false);
    });
  });
});

describe("audit trail", () => {
  // The audit trail end to end (docs/security.md, "Audit trail"): caregivers' acts through the
  // operator CLI, partners' requests through the gateway, operator commands; each service records
  // its own changes, the auth service stores them, and `ops audit` (the compiled CLI, in its own
  // process) lists them newest first.

  let stack: TestStack;
  let ops: ReturnType<typeof opsFor>;

  beforeAll(async () => {
    stack = await sharedTestStack(NO_RATE_LIMITS);
    ops = opsFor(stack.settings);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  interface Printed {
    id: string;
    occurred_at: string;
    actor: string;
    action: string;
    targets: string[];
    outcome: "ok" | "refused";
    reason: string | null;
    service: string;
    verified: boolean;
    verification: string;
  }

  /** `ops audit ... --json` as an operator runs it: exactly one JSON object, exit 0. */
  async function auditCli(...args: string[]): Promise<Printed[]> {
    const run = await runOpsCli(opsCliEnv(stack.settings), ["audit", ...args, "--json"]);
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
    expect(run.stdout.trim().split("\n")).toHaveLength(1);
    const out = JSON.parse(run.stdout) as { records: Printed[] };
    expect(Object.keys(out)).toEqual(["records"]);
    return out.records;
  }

  /** Records reach the trail through Kafka: waits until `count` records name `target`. */
  async function awaitRecords(target: string, count: number, timeoutMs = 30_000): Promise<void> {
    for (const deadline = Date.now() + timeoutMs; ; ) {
      const { records } = await ops.audit({ target });
      if (records.length >= count) return;
      if (Date.now() > deadline)
        throw new Error(
          `${records.length} of ${count} audit records for ${target}: ${JSON.stringify(records.map((r) => r.action))}`,
        );
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  const brief = (r: Printed) => [r.action, r.actor, r.outcome];

  describe("audit trail: connections", () => {
    it("a caregiver's decline, then the partner's DELETE and new request for the same elder: all three stay visible, in order, with their actors", async () => {
      const partner = await ops.partnerCreate({ name: "Audit Pharmacy" });
      const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const elder = await ops.elderCreate();

      const first = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
      expect(first.status).toBe(202);
      const id = first.json!.id as string;
      expect(await ops.connectionAct("decline", id)).toEqual({ id, internal_status: "declined" });
      expect((await call(stack.baseUrl, token, "DELETE", `/v1/connections/${id}`)).status).toBe(200);
      const again = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
      expect(again.status).toBe(202);
      // The partner sees a fresh pending request (a decline is never shown to it), and it is the same connection.
      expect(again.json).toMatchObject({ id, status: "pending" });

      await awaitRecords(id, 4);
      const records = await auditCli("--target", id);
      expect(records.map(brief)).toEqual([
        ["connection.request", partner.partner_id, "ok"],
        ["connection.delete", partner.partner_id, "ok"],
        ["connection.decline", "caregiver", "ok"],
        ["connection.request", partner.partner_id, "ok"],
      ]);
      for (const r of records) {
        expect(r).toMatchObject({ service: "connection", reason: null, id: expect.stringMatching(/^evt_/) });
        expect(r.targets).toEqual([id, partner.partner_id, elder.elder_id]);
      }
      const times = records.map((r) => Date.parse(r.occurred_at));
      expect([...times].sort((a, b) => b - a)).toEqual(times);

      // By the elder's id, the same history (and the elder's creation), and never the elder's address.
      const byElder = await auditCli("--target", elder.elder_id);
      expect(byElder.map((r) => r.action)).toEqual([
        "connection.request",
        "connection.delete",
        "connection.decline",
        "connection.request",
        "elder.create",
      ]);
      expect(JSON.stringify(byElder)).not.toContain(elder.address.split("@")[0]);
    });

    it("a caregiver's refused act is recorded with the rule that refused it", async () => {
      const partner = await ops.partnerCreate({ name: "Refused Audit Lab" });
      const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const elder = await ops.elderCreate();
      const id = (await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address })).json!
        .id as string;
      await expect(ops.connectionAct("sever", id)).rejects.toThrow(/only an approved connection can be severed/);
      await awaitRecords(id, 2);
      const [refused] = await auditCli("--target", id, "--limit", "1");
      expect(refused).toMatchObject({
        action: "connection.sever",
        actor: "caregiver",
        outcome: "refused",
        reason: "failed_precondition: the connection is pending; only an approved connection can be severed",
      });
    });
  });

  describe("audit trail: operator commands", () => {
    it("credential revoke and partner suspend appear with the operator as actor and their outcome; a refused revoke with its reason; no secret anywhere", async () => {
      const since = new Date().toISOString();
      const partner = await ops.partnerCreate({ name: "Audited Operator Clinic" });
      await ops.credentialRevoke(partner.test.client_id);
      await ops.partnerSetStatus(partner.partner_id, "suspended");
      const unknown = "cli_NoSuchCredential0000000";
      await expect(ops.credentialRevoke(unknown)).rejects.toThrow();

      await awaitRecords(partner.partner_id, 5);
      await awaitRecords(unknown, 1);
      const records = await auditCli("--target", partner.partner_id);
      expect(records.map(brief)).toEqual([
        ["partner.suspend", "operator", "ok"],
        ["credential.revoke", "operator", "ok"],
        ["credential.create", "operator", "ok"],
        ["credential.create", "operator", "ok"],
        ["partner.create", "operator", "ok"],
      ]);
      expect(records[1]!.targets).toEqual([partner.test.client_id, partner.partner_id]);
      expect(records.every((r) => r.service === "auth")).toBe(true);

      const [refused] = await auditCli("--target", unknown);
      expect(refused).toMatchObject({
        action: "credential.revoke",
        actor: "operator",
        outcome: "refused",
        reason: "not_found",
        targets: [unknown],
      });

      // Everything since the start of this test, the refusal included, and none of the secrets shown at creation.
      const all = await auditCli("--since", since);
      expect(all.map((r) => r.id)).toEqual(expect.arrayContaining([...records.map((r) => r.id), refused!.id]));
      const text = JSON.stringify(all);
      for (const secret of [partner.live.client_secret, partner.test.client_secret, partner.signing_secret]) {
        expect(text.includes(secret.replace(/^(sk_live|sk_test|whsec)_/, ""))).toBe(false);
      }
    });

    it("signing-key and signing-secret rotations and webhook address changes are recorded, never the secret or the address", async () => {
      const partner = await ops.partnerCreate({ name: "Rotating Audit Lab" });
      const url = "http://127.0.0.1:9/hooks?token=partner-own-token";
      await ops.partnerSetWebhook(partner.partner_id, url);
      const rotated = await ops.partnerRotateSigningSecret(partner.partner_id, "1");
      const key = await ops.keysRotate();
      await awaitRecords(partner.partner_id, 5);
      await awaitRecords(key.kid, 1);
      const records = await auditCli("--target", partner.partner_id, "--limit", "2");
      expect(records.map(brief)).toEqual([
        ["partner.rotate_signing_secret", "operator", "ok"],
        ["partner.set_webhook", "operator", "ok"],
      ]);
      expect((await auditCli("--target", key.kid)).map(brief)).toEqual([["signing_key.rotate", "operator", "ok"]]);
      const text = JSON.stringify(records);
      expect(text).not.toContain("partner-own-token");
      expect(text).not.toContain(rotated.signing_secret.replace(/^whsec_/, ""));
    });

    it("a webhook resend is recorded against the event, the partner and the connection; a refused one with its code", async () => {
      const partner = await ops.partnerCreate({ name: "Resending Audit Lab" });
      const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const elder = await ops.elderCreate();
      const id = (await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address })).json!
        .id as string;
      await ops.connectionAct("approve", id);
      let eventId: string | undefined;
      for (const deadline = Date.now() + 30_000; !eventId && Date.now() < deadline; ) {
        eventId = (await ops.webhookDeliveries(partner.partner_id)).deliveries[0]?.event_id;
        if (!eventId) await new Promise((r) => setTimeout(r, 100));
      }
      await ops.webhookResend(eventId!);
      const unknown = "evt_NoSuchEvent000000000000";
      await expect(ops.webhookResend(unknown)).rejects.toThrow();
      await awaitRecords(eventId!, 1);
      await awaitRecords(unknown, 1);
      const [resent] = await auditCli("--target", eventId!);
      expect(resent).toMatchObject({
        action: "webhook.resend",
        actor: "operator",
        outcome: "ok",
        service: "webhook",
        targets: [eventId, partner.partner_id, id],
      });
      const [refused] = await auditCli("--target", unknown);
      expect(refused).toMatchObject({
        action: "webhook.resend",
        actor: "operator",
        outcome: "refused",
        reason: "not_found",
      });
    });

    it("audit: append-only in fact: every record verifies on read; one altered in the database, or deleted and inserted again altered, is reported unverified; one stored before signatures were kept, as such", async () => {
      const partner = await ops.partnerCreate({ name: "Tamper Evident Clinic" });
      await ops.credentialRevoke(partner.test.client_id);
      await ops.partnerSetStatus(partner.partner_id, "suspended");
      await awaitRecords(partner.partner_id, 5);
      const before = await auditCli("--target", partner.partner_id);
      expect(before.map((r) => [r.action, r.verified, r.verification])).toEqual(
        before.map((r) => [r.action, true, "verified"]),
      );
      const byAction = (action: string) => before.find((r) => r.action === action)!;
      // Someone with write access to the audit database, as auth's own user had it: the suspension
      // now says the system did it; the revocation is deleted and inserted again naming another
      // credential (its signature copied along); the partner's creation loses its signature, as a
      // record stored by the previous release has none.
      const client = await MongoClient.connect(stack.settings.MONGODB_URI);
      try {
        const records = client
          .db(databaseName(stack.settings.DATA_NAMESPACE, "auth_audit"))
          .collection<{ _id: string; targets: string[] }>("audit_records");
        expect(
          (await records.updateOne({ _id: byAction("partner.suspend").id }, { $set: { actor: "system" } }))
            .modifiedCount,
        ).toBe(1);
        const revoke = (await records.findOne({ _id: byAction("credential.revoke").id }))!;
        await records.deleteOne({ _id: revoke._id });
        await records.insertOne({ ...revoke, targets: [partner.live.client_id, partner.partner_id] });
        expect(
          (
            await records.updateOne(
              { _id: byAction("partner.create").id },
              { $unset: { signature: "", signingKid: "" } },
            )
          ).modifiedCount,
        ).toBe(1);
      } finally {
        await client.close();
      }
      const after = await auditCli("--target", partner.partner_id);
      expect(after.map((r) => [r.action, r.actor, r.verified, r.verification])).toEqual([
        ["partner.suspend", "system", false, "signature does not match the record"],
        ["credential.revoke", "operator", false, "signature does not match the record"],
        ["credential.create", "operator", true, "verified"],
        ["credential.create", "operator", true, "verified"],
        ["partner.create", "operator", false, "stored before signatures were kept"],
      ]);
    });

    it("ops audit refuses a bad --limit, --since or --target with one line on stderr", async () => {
      for (const args of [
        ["--limit", "0"],
        ["--since", "yesterday"],
        ["--target", "amber.falcon.river@elders.example"],
      ]) {
        const run = await runOpsCli(opsCliEnv(stack.settings), ["audit", ...args, "--json"]);
        expect(run.code).not.toBe(0);
        expect(run.stdout).toBe("");
        expect(run.stderr.trim().split("\n")).toHaveLength(1);
      }
    });
  });
});

describe("auth revocation", () => {
  // A token whose credential was revoked or whose partner was suspended stops working within 2 s of
  // the operator command, on every gateway instance; reinstatement lets the partner ask for new tokens
  // (those issued before the suspension stay refused). Two gateways
  // run on the same auth service and Kafka; each learns of the change from the partner-events topic
  // on its own, and the auth service answers the operator only once both have applied it.

  let stack: TestStack;
  let second: RunningService;
  let gateways: string[];
  let ops: ReturnType<typeof opsFor>;
  let elder: string;
  const propagationMs: number[] = [];

  beforeAll(async () => {
    stack = await sharedTestStack(NO_RATE_LIMITS);
    second = await startWarmGateway(as(stack.settings, "gateway"), createLogger("gateway-2", stack.settings.LOG_LEVEL));
    gateways = [stack.baseUrl, `http://127.0.0.1:${second.port}`];
    ops = opsFor(stack.settings);
    elder = (await ops.elderCreate()).address;
  });
  afterAll(async () => {
    await second?.stop();
    await stack?.stop();
    if (propagationMs.length > 0)
      process.stderr.write(
        `revocation propagation to 2 gateways (ms, write to last confirmation): ${propagationMs.join(", ")}\n`,
      );
  });

  const statuses = (token: string) => Promise.all(gateways.map((g) => connectionRequestStatus(g, token, elder)));

  /** Polls every gateway until each answers `expected`; the ms it took, or throws after 2 s. */
  async function untilEvery(token: string, expected: number): Promise<number> {
    const started = performance.now();
    for (;;) {
      const seen = await statuses(token);
      if (seen.every((s) => s === expected)) return performance.now() - started;
      if (performance.now() - started > 2000)
        throw new Error(`after 2 s the gateways answer ${seen.join(", ")}, not ${expected}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  describe("revocation and suspension on live tokens, on every gateway instance", () => {
    it("both gateways accept a fresh token (the control)", async () => {
      const p = await ops.partnerCreate({ name: "Control Clinic" });
      const token = await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret);
      expect(await statuses(token)).toEqual([202, 202]);
    });

    it("credential revocation: live tokens are refused on every gateway as soon as the operator call returns (well within 2 s)", async () => {
      const p = await ops.partnerCreate({ name: "Revoked Pharmacy" });
      const live = await accessToken(gateways[1]!, p.live.client_id, p.live.client_secret);
      const test = await accessToken(gateways[0]!, p.test.client_id, p.test.client_secret);
      expect(await statuses(live)).toEqual([202, 202]);

      const res = await opsFor(stack.settings).credentialRevoke(p.live.client_id);
      expect(res).toEqual({ client_id: p.live.client_id, status: "revoked" });
      // At once: the call returned only after both gateways applied the event.
      expect(await statuses(live)).toEqual([401, 401]);
      // The partner's other credential is untouched.
      expect(await statuses(test)).toEqual([202, 202]);
      // And no new token for the revoked credential.
      const again = await requestToken(gateways[1]!, {
        grant_type: "client_credentials",
        client_id: p.live.client_id,
        client_secret: p.live.client_secret,
      });
      expect(JSON.parse(again.text)).toMatchObject({ error: "invalid_client" });
    });

    it("partner suspension: every token of the partner, live and test, is refused on every gateway at once; reinstatement does not revive them, new tokens work", async () => {
      const p = await ops.partnerCreate({ name: "Suspended Lab" });
      const live = await accessToken(gateways[0]!, p.live.client_id, p.live.client_secret);
      const test = await accessToken(gateways[1]!, p.test.client_id, p.test.client_secret);
      expect([...(await statuses(live)), ...(await statuses(test))]).toEqual([202, 202, 202, 202]);

      expect(await ops.partnerSetStatus(p.partner_id, "suspended")).toEqual({
        partner_id: p.partner_id,
        status: "suspended",
      });
      expect([...(await statuses(live)), ...(await statuses(test))]).toEqual([401, 401, 401, 401]);
      const refused = await requestToken(gateways[0]!, {
        grant_type: "client_credentials",
        client_id: p.live.client_id,
        client_secret: p.live.client_secret,
      });
      expect(JSON.parse(refused.text)).toMatchObject({ error: "invalid_client" });

      expect(await ops.partnerSetStatus(p.partner_id, "active")).toEqual({
        partner_id: p.partner_id,
        status: "active",
      });
      // A suspension is a revocation: the tokens issued before it stay refused.
      expect([...(await statuses(live)), ...(await statuses(test))]).toEqual([401, 401, 401, 401]);
      const fresh = await accessToken(gateways[1]!, p.live.client_id, p.live.client_secret);
      const freshTest = await accessToken(gateways[0]!, p.test.client_id, p.test.client_secret);
      expect([...(await statuses(fresh)), ...(await statuses(freshTest))]).toEqual([202, 202, 202, 202]);
    });

    it("tokens that stay dead: a token from before a suspension is refused after the reinstatement, on a gateway started after it too; tokens issued after the reinstatement work everywhere", async () => {
      const p = await ops.partnerCreate({ name: "Twice Suspended Lab" });
      const before = await accessToken(gateways[0]!, p.live.client_id, p.live.client_secret);
      await ops.partnerSetStatus(p.partner_id, "suspended");
      await ops.partnerSetStatus(p.partner_id, "active");
      const between = await accessToken(gateways[1]!, p.live.client_id, p.live.client_secret);
      expect([...(await statuses(before)), ...(await statuses(between))]).toEqual([401, 401, 202, 202]);
      // A second suspension kills the token issued between the two.
      await ops.partnerSetStatus(p.partner_id, "suspended");
      await ops.partnerSetStatus(p.partner_id, "active");
      const after = await accessToken(gateways[0]!, p.live.client_id, p.live.client_secret);
      expect([...(await statuses(before)), ...(await statuses(between)), ...(await statuses(after))]).toEqual([
        401, 401, 401, 401, 202, 202,
      ]);
      const late = await startWarmGateway(
        as(stack.settings, "gateway"),
        createLogger("gateway-late", stack.settings.LOG_LEVEL),
      );
      try {
        const url = `http://127.0.0.1:${late.port}`;
        expect(await Promise.all([before, between, after].map((t) => connectionRequestStatus(url, t, elder)))).toEqual([
          401, 401, 202,
        ]);
      } finally {
        await late.stop();
      }
    });

    it("within 2 s even when measured from the outside: revoke, then poll both gateways until both refuse", async () => {
      for (let i = 0; i < 5; i++) {
        const p = await ops.partnerCreate({ name: `Timed Clinic ${i}` });
        const token = await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret);
        const started = performance.now();
        await ops.credentialRevoke(p.live.client_id);
        const afterCall = performance.now() - started;
        const extra = await untilEvery(token, 401);
        propagationMs.push(Math.round(afterCall + extra));
        expect(afterCall + extra).toBeLessThan(2000);
      }
    });

    it("the auth service reports both gateways (and the auth replica, for its cache) confirmed the change, and how long it took", async () => {
      const p = await ops.partnerCreate({ name: "Reported Clinic" });
      const clients = (await import("@pi/common/rpc/clients")).clientsFor(stack.settings);
      const res = await clients.authAdmin().revokeCredential({ clientId: p.test.client_id });
      expect(res.propagation).toMatchObject({ gateways: 2, confirmed: 2, authReplicas: 1, authConfirmed: 1 });
      propagationMs.push(Number(res.propagation!.elapsedMs));
      expect(Number(res.propagation!.elapsedMs)).toBeLessThan(2000);
    });

    it("a gateway that never confirms (dead, still inside its liveness window) delays the answer by at most the timeout, and is reported", async () => {
      const ghost = { _id: "ghost-gateway", nextOffsets: { "0": 0 }, seenAt: new Date() };
      await withAuthDb(stack.settings, (db) => db.collection("gateways").insertOne(ghost as never));
      try {
        const p = await ops.partnerCreate({ name: "Ghost Clinic" });
        const token = await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret);
        const clients = (await import("@pi/common/rpc/clients")).clientsFor(stack.settings);
        const started = performance.now();
        const res = await clients.authAdmin().revokeCredential({ clientId: p.live.client_id });
        const took = performance.now() - started;
        expect(res.propagation).toMatchObject({ gateways: 3, confirmed: 2 });
        expect(took).toBeGreaterThanOrEqual(1100);
        expect(took).toBeLessThan(2000);
        // The two live gateways applied it all the same.
        expect(await statuses(token)).toEqual([401, 401]);
      } finally {
        await withAuthDb(stack.settings, (db) =>
          db.collection("gateways").deleteOne({ _id: "ghost-gateway" } as never),
        );
      }
    });

    it("a gateway started after the revocation learns it from the snapshot", async () => {
      const p = await ops.partnerCreate({ name: "Late Gateway Clinic" });
      const token = await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret);
      const suspendedToken = await accessToken(stack.baseUrl, p.test.client_id, p.test.client_secret);
      await ops.credentialRevoke(p.live.client_id);
      const other = await ops.partnerCreate({ name: "Late Suspended Clinic" });
      const otherToken = await accessToken(stack.baseUrl, other.live.client_id, other.live.client_secret);
      await ops.partnerSetStatus(other.partner_id, "suspended");
      const third = await startWarmGateway(
        as(stack.settings, "gateway"),
        createLogger("gateway-3", stack.settings.LOG_LEVEL),
      );
      try {
        const url = `http://127.0.0.1:${third.port}`;
        expect(await connectionRequestStatus(url, token, elder)).toBe(401);
        expect(await connectionRequestStatus(url, otherToken, elder)).toBe(401);
        expect(await connectionRequestStatus(url, suspendedToken, elder)).toBe(202);
        // ...and follows the topic from there on: the reinstatement admits new tokens, not the old one.
        await ops.partnerSetStatus(other.partner_id, "active");
        expect(await connectionRequestStatus(url, otherToken, elder)).toBe(401);
        const renewed = await accessToken(stack.baseUrl, other.live.client_id, other.live.client_secret);
        expect(await connectionRequestStatus(url, renewed, elder)).toBe(202);
      } finally {
        await third.stop();
      }
    });

    // Last: it revokes the key that signed every token above.
    it("emergency key revocation: every gateway refuses the key's tokens, remembered ones too, as soon as `keys revoke` returns; the replacement key signs at once", async () => {
      const p = await ops.partnerCreate({ name: "Compromised Key Clinic" });
      const token = await accessToken(gateways[0]!, p.live.client_id, p.live.client_secret);
      const kid = decodeJwt(token).header.kid as string;
      // Used on both gateways, so both remember it as verified (their LRU of passed tokens).
      expect(await statuses(token)).toEqual([202, 202]);
      expect(await statuses(token)).toEqual([202, 202]);

      const revoked = await ops.keysRevoke(kid);
      expect(revoked).toMatchObject({ kid, status: "revoked" });
      expect(revoked.replacement_kid).toMatch(/^key_/);
      // At once, not at the next JWKS refresh (30 s here): the partner event reached both gateways.
      expect(await statuses(token)).toEqual([401, 401]);

      const fresh = await accessToken(gateways[1]!, p.live.client_id, p.live.client_secret);
      expect(decodeJwt(fresh).header.kid).toBe(revoked.replacement_kid);
      expect(await statuses(fresh)).toEqual([202, 202]);
      // Idempotent; an unknown key is refused.
      expect(await ops.keysRevoke(kid)).toMatchObject({ kid, status: "revoked", replacement_kid: null });
      await expect(ops.keysRevoke("key_doesnotexist")).rejects.toThrow(/no signing key/);

      // A gateway started afterwards refuses it too.
      const late = await startWarmGateway(
        as(stack.settings, "gateway"),
        createLogger("gateway-late-key", stack.settings.LOG_LEVEL),
      );
      try {
        const url = `http://127.0.0.1:${late.port}`;
        expect([
          await connectionRequestStatus(url, token, elder),
          await connectionRequestStatus(url, fresh, elder),
        ]).toEqual([401, 202]);
      } finally {
        await late.stop();
      }
    });
  });
});

describe("auth key rotation", () => {
  // Key rotation without downtime (docs/authentication.md, "Key rotation"): the new key is published
  // at once and signs only after every auth replica and gateway has reloaded the key set (here
  // JWKS_REFRESH_SECONDS=1, so after 2 s); tokens signed with the old key keep verifying. An emergency
  // revocation (`keys revoke`) takes effect on every replica when the command returns.

  let stack: TestStack;
  let replica: RunningService;
  let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;
  let elder: string;

  beforeAll(async () => {
    stack = await startTestStack({ ...NO_RATE_LIMITS, JWKS_REFRESH_SECONDS: "1" });
    // A second auth replica on the same database, as a deployment with two auth pods has.
    replica = await startAuthService(as(stack.settings, "auth"), createLogger("auth-2", stack.settings.LOG_LEVEL));
    const ops = opsFor(stack.settings);
    partner = await ops.partnerCreate({ name: "Rotation Clinic" });
    elder = (await ops.elderCreate()).address;
  });
  afterAll(async () => {
    await replica?.stop();
    await stack?.stop();
  });

  async function use(token: string): Promise<number> {
    const res = await fetch(`${stack.baseUrl}/v1/connections`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ elder }),
    });
    await res.arrayBuffer();
    return res.status;
  }

  const kidOf = (token: string) => decodeJwt(token).header.kid as string;

  describe("key rotation without downtime", () => {
    it("key rotation: no request fails while a new key is rotated in; the new key signs on every replica after the activation delay; old tokens keep working", async () => {
      const replicaAuth = clientsFor({
        ...as(stack.settings, "gateway"),
        AUTH_SERVICE_URL: `http://127.0.0.1:${replica.port}`,
      }).auth();
      const fromReplica = async () => {
        const res = await replicaAuth.issueToken({
          clientId: partner.live.client_id,
          clientSecret: partner.live.client_secret,
        });
        if (res.outcome.case !== "token") throw new Error("no token from the replica");
        return res.outcome.value.accessToken;
      };
      const oldToken = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const oldKid = kidOf(oldToken);
      expect(kidOf(await fromReplica())).toBe(oldKid);

      const failures: string[] = [];
      const kidsSeen = new Set<string>();
      let running = true;
      const traffic = (async () => {
        while (running) {
          const fresh = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret).catch(
            (e: Error) => {
              failures.push(`token: ${e.message}`);
              return undefined;
            },
          );
          const viaReplica = await fromReplica();
          for (const t of [fresh, viaReplica, oldToken]) {
            if (!t) continue;
            kidsSeen.add(kidOf(t));
            const status = await use(t);
            if (status !== 202) failures.push(`${status} for a token of ${kidOf(t)}`);
          }
          await new Promise((r) => setTimeout(r, 25));
        }
      })();

      const rotated = await opsFor(stack.settings).keysRotate();
      expect(rotated.kid).not.toBe(oldKid);
      const activatesAt = Date.parse(rotated.activates_at);
      expect(activatesAt - Date.now()).toBeGreaterThan(1000);
      // Before activation both replicas still sign with the old key.
      expect(kidOf(await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret))).toBe(oldKid);

      await new Promise((r) => setTimeout(r, activatesAt - Date.now() + 1500));
      running = false;
      await traffic;

      expect(failures).toEqual([]);
      expect(kidOf(await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret))).toBe(
        rotated.kid,
      );
      expect(kidOf(await fromReplica())).toBe(rotated.kid);
      expect([...kidsSeen].sort()).toEqual([oldKid, rotated.kid].sort());
      expect(await use(oldToken)).toBe(202);
    });

    it("emergency key revocation (`ops keys revoke`): when the command returns, both auth replicas sign with the replacement key and the gateway refuses the revoked key's tokens, not at the next rotation", async () => {
      const replicaAuth = clientsFor({
        ...as(stack.settings, "gateway"),
        AUTH_SERVICE_URL: `http://127.0.0.1:${replica.port}`,
      }).auth();
      const fromReplica = async () => {
        const res = await replicaAuth.issueToken({
          clientId: partner.live.client_id,
          clientSecret: partner.live.client_secret,
        });
        if (res.outcome.case !== "token") throw new Error("no token from the replica");
        return res.outcome.value.accessToken;
      };
      const viaGateway = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const viaReplica = await fromReplica();
      const kid = kidOf(viaGateway);
      expect(kidOf(viaReplica)).toBe(kid);
      expect([await use(viaGateway), await use(viaReplica)]).toEqual([202, 202]);

      const revoked = await opsFor(stack.settings).keysRevoke(kid);
      expect(revoked).toMatchObject({ kid, status: "revoked" });
      const replacement = revoked.replacement_kid!;
      expect(replacement).toMatch(/^key_/);
      expect([await use(viaGateway), await use(viaReplica)]).toEqual([401, 401]);
      const [fresh, freshFromReplica] = [
        await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret),
        await fromReplica(),
      ];
      expect([kidOf(fresh), kidOf(freshFromReplica)]).toEqual([replacement, replacement]);
      expect([await use(fresh), await use(freshFromReplica)]).toEqual([202, 202]);
      // The key is gone from the published set, and the act is on the audit trail.
      const jwks = JSON.parse((await replicaAuth.getJwks({})).jwksJson) as { keys: { kid: string }[] };
      expect(jwks.keys.map((k) => k.kid)).not.toContain(kid);
      expect(jwks.keys.map((k) => k.kid)).toContain(replacement);
    });
  });
});
