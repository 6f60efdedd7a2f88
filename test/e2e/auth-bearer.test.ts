import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { decodeJwt, generateKeyPair } from "jose";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, opsFor } from "../support/partner-api.js";
import { NO_RATE_LIMITS, resign, signingKey } from "../support/auth.js";

// Authentication, item 5: a missing, malformed, invalid, expired or revoked bearer gives 401 with
// code unauthorized, the one body whatever the cause. Item 4: a valid token without the route's
// scope gets 403 insufficient_scope.

let stack: TestStack;
let shortLived: TestStack;
let ops: ReturnType<typeof opsFor>;
let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;
let token: string;
let elder: string;

beforeAll(async () => {
  stack = await startTestStack(NO_RATE_LIMITS);
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
async function send(baseUrl: string, authorization: string | undefined, method = "POST", path = "/v1/connections", body: unknown = { elder }) {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { ...(authorization !== undefined ? { authorization } : {}), ...(body !== null ? { "content-type": "application/json" } : {}) },
    body: body !== null ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, wwwAuthenticate: res.headers.get("www-authenticate"), contentType: res.headers.get("content-type"), text: await res.text() };
}

const UNAUTHORIZED = {
  error: { type: "authentication_error", code: "unauthorized", message: "The bearer token is missing, malformed, invalid, expired or revoked." },
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

  it.each([
    ["another scheme", () => `Basic ${Buffer.from("a:b").toString("base64")}`],
    ["the scheme alone", () => "Bearer"],
    ["the scheme and a space", () => "Bearer "],
    ["no scheme", () => token],
    ["two tokens", () => `Bearer ${token} ${token}`],
    ["characters outside b64token", () => `Bearer ${token}!`],
    ["an empty header", () => ""],
  ])("401 cause: malformed Authorization header (%s)", async (_what, header) => {
    expectUnauthorized(await send(stack.baseUrl, header()), reference);
  });

  it.each([
    ["not a JWT", () => "Bearer abc.def"],
    ["three garbage parts", () => "Bearer aaaa.bbbb.cccc"],
    ["a tampered payload", () => {
      const [h, p, sig] = token.split(".");
      const claims = JSON.parse(Buffer.from(p!, "base64url").toString()) as Record<string, unknown>;
      return `Bearer ${h}.${Buffer.from(JSON.stringify({ ...claims, scope: "connections:write files:write admin" })).toString("base64url")}.${sig}`;
    }],
    ["a flipped signature byte", () => {
      const [h, p, sig] = token.split(".");
      const bytes = Buffer.from(sig!, "base64url");
      bytes[5] ^= 0xff;
      return `Bearer ${h}.${p}.${bytes.toString("base64url")}`;
    }],
    ["alg none", () => {
      const [, p] = token.split(".");
      return `Bearer ${Buffer.from(JSON.stringify({ alg: "none", typ: "at+jwt" })).toString("base64url")}.${p}.`;
    }],
  ])("401 cause: invalid token (%s)", async (_what, header) => {
    expectUnauthorized(await send(stack.baseUrl, header()), reference);
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
    expectUnauthorized(await send(stack.baseUrl, `Bearer ${await resign(stack.settings, token, claims, header)}`), reference);
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
      body: new URLSearchParams({ grant_type: "client_credentials", client_id: p.live.client_id, client_secret: p.live.client_secret }),
    });
    const body = (await tokenRes.json()) as { access_token: string; expires_in: number };
    expect(body.expires_in).toBe(1);
    const { exp } = decodeJwt(body.access_token);
    // Accepted for at least expires_in from the moment it was asked for...
    expect(exp! * 1000 - mintedAt).toBeGreaterThanOrEqual(1000);
    const fresh = await send(shortLived.baseUrl, `Bearer ${body.access_token}`, "POST", "/v1/connections", { elder: shortElder });
    if (Date.now() < exp! * 1000) expect(fresh.status).toBe(202);
    // ...and refused, with the one 401, once its exp has passed.
    await new Promise((r) => setTimeout(r, Math.max(0, exp! * 1000 - Date.now()) + 100));
    expectUnauthorized(await send(shortLived.baseUrl, `Bearer ${body.access_token}`, "POST", "/v1/connections", { elder: shortElder }), reference);
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

  it("a bad bearer is 401 before anything else: an unknown /v1 path, a wrong method, a bad body", async () => {
    expectUnauthorized(await send(stack.baseUrl, "Bearer nope", "GET", "/v1/nothing-here", null), reference);
    expectUnauthorized(await send(stack.baseUrl, "Bearer nope", "PUT", "/v1/connections", null), reference);
    expectUnauthorized(await send(stack.baseUrl, "Bearer nope", "POST", "/v1/connections", { wrong: true }), reference);
  });
});

describe("403 insufficient_scope", () => {
  const INSUFFICIENT = {
    error: { type: "permission_error", code: "insufficient_scope", message: "The access token lacks the scope this operation requires." },
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
    expect((await send(stack.baseUrl, `Bearer ${token}`, "GET", `/v1/connections/${connectionId}`, null)).status).toBe(200);
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
    const connectionsOnly = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret, "connections:write");
    const form = new FormData();
    form.append("elder", elder);
    form.append("file", new Blob(["hello"], { type: "text/plain" }), "note.txt");
    const res = await fetch(`${stack.baseUrl}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${connectionsOnly}` }, body: form });
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual(INSUFFICIENT);
  });

  it("insufficient_scope: GET /v1/files/{id} needs files:write", async () => {
    const connectionsOnly = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret, "connections:write");
    const res = await send(stack.baseUrl, `Bearer ${connectionsOnly}`, "GET", "/v1/files/file_doesnotexist", null);
    expect(res.status).toBe(403);
    expect(JSON.parse(res.text)).toEqual(INSUFFICIENT);
  });

  it("401 comes before 403: a bad bearer on the files routes is unauthorized", async () => {
    const res = await send(stack.baseUrl, "Bearer nope", "GET", "/v1/files/file_doesnotexist", null);
    expect(res.status).toBe(401);
  });

  it("a connections-only token is enough for the connection routes", async () => {
    const connectionsOnly = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret, "connections:write");
    expect((await send(stack.baseUrl, `Bearer ${connectionsOnly}`)).status).toBe(202);
  });
});
