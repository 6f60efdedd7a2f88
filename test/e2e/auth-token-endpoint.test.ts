import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { call, opsFor, requestToken } from "../support/partner-api.js";
import { decodeJwt, NO_RATE_LIMITS } from "../support/auth.js";

// POST /oauth/token, row by row of the spec's status table (RFC 6749 sections 4.4, 5.1, 5.2).

let stack: TestStack;
let ops: ReturnType<typeof opsFor>;
let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;

beforeAll(async () => {
  stack = await startTestStack(NO_RATE_LIMITS);
  ops = opsFor(stack.settings);
  partner = await ops.partnerCreate({ name: "Token Endpoint Pharmacy" });
});
afterAll(async () => {
  await stack?.stop();
});

const good = () => ({ grant_type: "client_credentials", client_id: partner.live.client_id, client_secret: partner.live.client_secret });

async function raw(body: string | undefined, contentType?: string, method = "POST") {
  const res = await fetch(`${stack.baseUrl}/oauth/token`, {
    method,
    headers: contentType ? { "content-type": contentType } : {},
    body,
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

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
  it.each(["form", "json"] as const)("200 with a %s body: exactly the token response fields, never cached", async (encoding) => {
    const res = await requestToken(stack.baseUrl, good(), encoding);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("pragma")).toBe("no-cache");
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const body = JSON.parse(res.text) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(["access_token", "expires_in", "scope", "token_type"]);
    expect(body).toMatchObject({ token_type: "Bearer", expires_in: 900, scope: "connections:write files:write" });
    expect(body.access_token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
  });

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

  it("a content type with a charset parameter is accepted", async () => {
    const res = await raw(JSON.stringify(good()), "application/json; charset=utf-8");
    expect(res.status).toBe(200);
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
    const creds = { grant_type: "client_credentials", client_id: narrow.live.client_id, client_secret: narrow.live.client_secret };
    const omitted = await requestToken(stack.baseUrl, creds);
    expect(omitted.status).toBe(200);
    const body = JSON.parse(omitted.text) as { scope: string; access_token: string };
    expect(body.scope).toBe("files:write");
    expectOAuthError(await requestToken(stack.baseUrl, { ...creds, scope: "connections:write" }), "invalid_scope");
    expectOAuthError(await requestToken(stack.baseUrl, { ...creds, scope: "files:write connections:write" }), "invalid_scope");
    // ...and such a token cannot use the connection routes.
    const res = await call(stack.baseUrl, body.access_token, "POST", "/v1/connections", { elder: `a.b.c@${stack.settings.ADDRESS_DOMAIN}` });
    expect(res.status).toBe(403);
  });

  it("a bad secret with a bad scope is invalid_client, not invalid_scope: scopes cannot be probed without the secret", async () => {
    expectOAuthError(await requestToken(stack.baseUrl, { ...good(), client_secret: "sk_live_wrong", scope: "admin" }), "invalid_client");
  });
});

describe("token endpoint row 400 invalid_request", () => {
  it.each(["grant_type", "client_id", "client_secret"] as const)("missing %s (form and JSON)", async (field) => {
    const body: Record<string, string> = good();
    delete body[field];
    expectOAuthError(await requestToken(stack.baseUrl, body, "form"), "invalid_request");
    expectOAuthError(await requestToken(stack.baseUrl, body, "json"), "invalid_request");
  });

  it.each(["client_id", "client_secret"] as const)("empty %s", async (field) => {
    expectOAuthError(await requestToken(stack.baseUrl, { ...good(), [field]: "" }), "invalid_request");
  });

  it.each([
    ["a number", 42],
    ["an array", ["a"]],
    ["an object", { a: 1 }],
    ["null", null],
    ["a boolean", true],
  ])("a field of the wrong type in JSON: %s", async (_what, value) => {
    for (const field of ["grant_type", "client_id", "client_secret", "scope"]) {
      expectOAuthError(await raw(JSON.stringify({ ...good(), [field]: value }), "application/json"), "invalid_request");
    }
  });

  it.each(["grant_type", "client_id", "client_secret", "scope"])("a duplicated form field: %s (RFC 6749 section 3.2)", async (field) => {
    const form = new URLSearchParams({ ...good(), scope: "files:write" });
    form.append(field, form.get(field)!);
    expectOAuthError(await raw(form.toString(), "application/x-www-form-urlencoded"), "invalid_request");
  });

  it("a nested form field (client_id[x]=...)", async () => {
    const form = `grant_type=client_credentials&client_id[x]=${partner.live.client_id}&client_secret=${partner.live.client_secret}`;
    expectOAuthError(await raw(form, "application/x-www-form-urlencoded"), "invalid_request");
  });

  it.each([
    ["text/plain", JSON.stringify({})],
    ["multipart/form-data; boundary=x", "--x--"],
    ["application/xml", "<a/>"],
  ])("an unsupported content type: %s", async (type, body) => {
    expectOAuthError(await raw(body, type), "invalid_request");
  });

  it("no content type and no body", async () => {
    expectOAuthError(await raw(undefined), "invalid_request");
  });

  it.each(['{"grant_type": "client_credentials",', "not json", '"a string"', "[]", "null", ""])("malformed or non-object JSON: %j", async (body) => {
    expectOAuthError(await raw(body, "application/json"), "invalid_request");
  });

  it("a body over 16 kB", async () => {
    expectOAuthError(await requestToken(stack.baseUrl, { ...good(), padding: "x".repeat(20_000) }), "invalid_request");
  });
});

describe("token endpoint row 400 unsupported_grant_type", () => {
  it.each(["password", "authorization_code", "refresh_token", "CLIENT_CREDENTIALS"])("grant_type %j", async (grant) => {
    expectOAuthError(await requestToken(stack.baseUrl, { ...good(), grant_type: grant }), "unsupported_grant_type");
    expectOAuthError(await requestToken(stack.baseUrl, { ...good(), grant_type: grant }, "json"), "unsupported_grant_type");
  });
});

describe("token endpoint row 400 invalid_client", () => {
  it("unknown client and bad secret, in both encodings", async () => {
    for (const encoding of ["form", "json"] as const) {
      expectOAuthError(await requestToken(stack.baseUrl, { ...good(), client_id: "cli_doesnotexist" }, encoding), "invalid_client");
      expectOAuthError(await requestToken(stack.baseUrl, { ...good(), client_secret: `${partner.live.client_secret}x` }, encoding), "invalid_client");
      // The other credential's secret is a bad secret too.
      expectOAuthError(await requestToken(stack.baseUrl, { ...good(), client_secret: partner.test.client_secret }, encoding), "invalid_client");
    }
  });
});

describe("token endpoint: other methods", () => {
  it("GET /oauth/token is 405 in the error envelope, never a 500", async () => {
    const res = await raw(undefined, undefined, "GET");
    expect(res.status).toBe(405);
    expect((JSON.parse(res.text) as { error: { code: string } }).error.code).toBe("method_not_allowed");
  });
});
