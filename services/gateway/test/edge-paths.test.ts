import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectionv1 } from "@pi/proto";
import { PARTNER_ERRORS } from "../src/errors.js";
import { startEdge, type Answer, type Edge } from "./edge-harness.js";

// One rule for paths (docs/edge.md, "Paths"): the gateway serves only the canonical path of each
// route, byte for byte: case-sensitive, no trailing slash. Every other spelling is the envelope's
// 404, so that no spelling reaches a route while skipping the middleware keyed on the canonical
// path (the per-IP limit of POST /oauth/token, the bearer and per-partner limit of /v1).

const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
const connections = {
  getConnection: () => ({ connection: { id: CON, status: connectionv1.ExternalStatus.APPROVED } }),
};

function expectNotFound(res: Answer, what: string) {
  expect({ what, status: res.status, body: res.json }).toEqual({
    what,
    status: 404,
    body: { error: { type: "invalid_request_error", code: "not_found", message: PARTNER_ERRORS.not_found.message } },
  });
}

const tokenAttempt = (edge: Edge, path: string, localAddress: string) =>
  edge.send("POST", path, {
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: "grant_type=client_credentials",
    localAddress,
  });

const TOKEN_SPELLINGS = [
  "/oauth/token/",
  "/OAUTH/TOKEN",
  "/OAuth/Token/",
  "/oauth/TOKEN",
  "/oauth//token",
  "/oauth/%74oken",
];

describe("the per-IP limit of POST /oauth/token cannot be bypassed by another spelling of the path", () => {
  let edge: Edge;
  beforeAll(async () => {
    edge = await startEdge({ settings: { RATE_LIMIT_TOKEN_PER_MINUTE: "60" } });
  });
  afterAll(() => edge.stop());

  it("other spellings of the token path are the envelope's 404, never the token route", async () => {
    for (const path of TOKEN_SPELLINGS) expectNotFound(await tokenAttempt(edge, path, "127.0.0.3"), `POST ${path}`);
  });

  it("an IP over its budget gets nothing from the token route under any spelling", async () => {
    const first = await Promise.all(Array.from({ length: 61 }, () => tokenAttempt(edge, "/oauth/token", "127.0.0.4")));
    expect(first.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(1);
    for (const path of TOKEN_SPELLINGS) {
      const res = await tokenAttempt(edge, path, "127.0.0.4");
      expect({ path, status: res.status }).not.toEqual({ path, status: 400 });
      expect({ path, oauthShape: typeof res.json?.error === "string" }).toEqual({ path, oauthShape: false });
    }
  });
});

describe("/v1 middleware cannot be skipped by another spelling of the path", () => {
  let edge: Edge;
  beforeAll(async () => {
    edge = await startEdge({ settings: { RATE_LIMIT_V1_PER_SECOND: "50" }, connections });
  });
  afterAll(() => edge.stop());

  it("without a bearer, /V1/... is not routed (never the 403 of a route that skipped the bearer)", async () => {
    for (const path of [`/V1/connections/${CON}`, `/V1/connections/${CON}/`, `/V1/Connections/${CON}`]) {
      expectNotFound(await edge.send("GET", path), `GET ${path}`);
    }
    expectNotFound(await edge.send("POST", "/V1/files"), "POST /V1/files");
    // Under /v1 itself, any path is checked for a bearer before it is routed (docs/edge.md).
    expect((await edge.send("GET", `/v1/CONNECTIONS/${CON}`)).status).toBe(401);
  });

  it("with a bearer, a trailing slash or another case is not routed either", async () => {
    const authorization = `Bearer ${await edge.token("ptr_paths")}`;
    for (const path of [`/v1/connections/${CON}/`, `/V1/connections/${CON}`, `/v1/Connections/${CON}`]) {
      expectNotFound(await edge.send("GET", path, { headers: { authorization } }), `GET ${path}`);
    }
    // The canonical path is still served.
    expect((await edge.send("GET", `/v1/connections/${CON}`, { headers: { authorization } })).status).toBe(200);
  });
});

describe("every route answers only its canonical path", () => {
  let edge: Edge;
  beforeAll(async () => {
    edge = await startEdge({ connections });
  });
  afterAll(() => edge.stop());

  it.each([
    ["GET", "/healthz"],
    ["GET", "/readyz"],
    ["GET", "/readyz/traffic"],
    ["GET", "/openapi.json"],
    ["GET", "/openapi.yaml"],
    ["GET", "/docs"],
  ])("%s %s: served as is; upper-cased or with a trailing slash, the envelope's 404", async (method, path) => {
    expect((await edge.send(method, path)).status).toBe(200);
    expectNotFound(await edge.send(method, `${path}/`), `${method} ${path}/`);
    expectNotFound(await edge.send(method, path.toUpperCase()), `${method} ${path.toUpperCase()}`);
  });

  it("another method on a non-canonical spelling of a known path is 404, not a 405 that confirms the route", async () => {
    const res = await edge.send("DELETE", "/OAUTH/TOKEN");
    expectNotFound(res, "DELETE /OAUTH/TOKEN");
    expect(res.headers.allow).toBeUndefined();
  });
});
