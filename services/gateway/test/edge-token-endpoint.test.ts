import { afterAll, beforeAll, beforeEach, describe, expect, it } from "@jest/globals";
import { startEdge, type Answer, type Edge } from "./edge-harness.js";

// POST /oauth/token at the edge: every request the gateway refuses by itself (RFC 6749 sections
// 2.3.1, 3.2, 4.4 and 5.2: malformed bodies and headers, other grants, other methods) is a 400 in
// the OAuth error shape, never cached, never a 5xx, and never reaches the auth service. The rows
// that need auth's answer (200, invalid_client, invalid_scope) are in test/e2e/auth.test.ts.

const CLIENT = {
  grant_type: "client_credentials",
  client_id: "cli_LiveClient0000000000000",
  client_secret: "sk_live_secret-of-the-client",
};
const TOKEN_BUDGET = 60; // RATE_LIMIT_TOKEN_PER_MINUTE: the smallest the settings allow

let edge: Edge;
/** What reached the auth service: one entry per token request, as the gateway sent it. */
let issued: { clientId: string; clientSecret: string; scope?: string }[] = [];

beforeAll(async () => {
  edge = await startEdge({
    // One trusted proxy hop: the per-IP test takes client IPs of its own (X-Forwarded-For).
    settings: { RATE_LIMIT_TOKEN_PER_MINUTE: String(TOKEN_BUDGET), TRUSTED_PROXY_HOPS: "1" },
    auth: {
      issueTokens: (req) => ({
        responses: req.requests.map((r) => {
          issued.push({ clientId: r.clientId, clientSecret: r.clientSecret, ...(r.scope ? { scope: r.scope } : {}) });
          return {
            outcome: {
              case: "token" as const,
              value: { accessToken: "a.b.c", expiresIn: 900n, scope: r.scope || "connections:write files:write" },
            },
          };
        }),
      }),
    },
  });
});
afterAll(() => edge.stop());
beforeEach(() => {
  issued = [];
});

let ip = 0;
/** A request from a client IP of its own, so that no test spends another's per-IP budget. */
function post(
  body: string | undefined,
  contentType?: string,
  headers: Record<string, string> = {},
  method = "POST",
): Promise<Answer> {
  return edge.send(method, "/oauth/token", {
    headers: {
      "x-forwarded-for": `198.51.100.${++ip % 250}`,
      ...(contentType ? { "content-type": contentType } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body } : {}),
  });
}
const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString("base64")}`;

function expectOAuthError(res: Answer, error: string) {
  expect(res.status).toBe(400);
  expect(Object.keys(res.json as object).sort()).toEqual(["error", "error_description"]);
  expect(res.json.error).toBe(error);
  expect(typeof res.json.error_description).toBe("string");
  expect(res.headers["cache-control"]).toBe("no-store");
  expect(res.headers["content-type"]).toMatch(/^application\/json/);
  expect(issued).toEqual([]);
}

describe("token endpoint row 400 invalid_request, refused at the edge before auth is asked", () => {
  it("the control: a well-formed request reaches auth with its credentials, in either encoding", async () => {
    expect((await post(form(CLIENT), "application/x-www-form-urlencoded")).status).toBe(200);
    expect((await post(JSON.stringify(CLIENT), "application/json")).status).toBe(200);
    expect(issued).toEqual([
      { clientId: CLIENT.client_id, clientSecret: CLIENT.client_secret },
      { clientId: CLIENT.client_id, clientSecret: CLIENT.client_secret },
    ]);
  });

  it("a content type with a charset parameter is accepted", async () => {
    expect((await post(JSON.stringify(CLIENT), "application/json; charset=utf-8")).status).toBe(200);
    expect((await post(form(CLIENT), "application/x-www-form-urlencoded; charset=UTF-8")).status).toBe(200);
  });

  it.each(["grant_type", "client_id", "client_secret"] as const)("missing %s (form and JSON)", async (field) => {
    const body: Record<string, string> = { ...CLIENT };
    delete body[field];
    expectOAuthError(await post(form(body), "application/x-www-form-urlencoded"), "invalid_request");
    expectOAuthError(await post(JSON.stringify(body), "application/json"), "invalid_request");
  });

  it.each(["client_id", "client_secret"] as const)("empty %s", async (field) => {
    expectOAuthError(
      await post(form({ ...CLIENT, [field]: "" }), "application/x-www-form-urlencoded"),
      "invalid_request",
    );
  });

  it.each([
    ["a number", 42],
    ["an array", ["a"]],
    ["an object", { a: 1 }],
    ["null", null],
    ["a boolean", true],
  ])("a field of the wrong type in JSON: %s", async (_what, value) => {
    for (const field of ["grant_type", "client_id", "client_secret", "scope"]) {
      expectOAuthError(
        await post(JSON.stringify({ ...CLIENT, [field]: value }), "application/json"),
        "invalid_request",
      );
    }
  });

  it.each(["grant_type", "client_id", "client_secret", "scope"])(
    "a duplicated form field: %s (RFC 6749 section 3.2)",
    async (field) => {
      const body = new URLSearchParams({ ...CLIENT, scope: "files:write" });
      body.append(field, body.get(field)!);
      expectOAuthError(await post(body.toString(), "application/x-www-form-urlencoded"), "invalid_request");
    },
  );

  it("a nested form field (client_id[x]=...)", async () => {
    expectOAuthError(
      await post(
        `grant_type=client_credentials&client_id[x]=${CLIENT.client_id}&client_secret=${CLIENT.client_secret}`,
        "application/x-www-form-urlencoded",
      ),
      "invalid_request",
    );
  });

  it.each([
    ["text/plain", JSON.stringify(CLIENT)],
    ["multipart/form-data; boundary=x", "--x--"],
    ["application/xml", "<a/>"],
  ])("an unsupported content type: %s", async (type, body) => {
    expectOAuthError(await post(body, type), "invalid_request");
  });

  it("no content type and no body", async () => {
    expectOAuthError(await post(undefined), "invalid_request");
  });

  it.each(['{"grant_type": "client_credentials",', "not json", '"a string"', "[]", "null", ""])(
    "malformed or non-object JSON: %j",
    async (body) => {
      expectOAuthError(await post(body, "application/json"), "invalid_request");
    },
  );

  it("a body over 16 kB, in either encoding", async () => {
    expectOAuthError(
      await post(form({ ...CLIENT, padding: "x".repeat(20_000) }), "application/x-www-form-urlencoded"),
      "invalid_request",
    );
    expectOAuthError(
      await post(JSON.stringify({ ...CLIENT, padding: "x".repeat(20_000) }), "application/json"),
      "invalid_request",
    );
  });

  it("the same bytes whatever the cause", async () => {
    const answers = await Promise.all([
      post(undefined),
      post("not json", "application/json"),
      post(form({ ...CLIENT, client_id: "" }), "application/x-www-form-urlencoded"),
    ]);
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
  });
});

describe("token endpoint row 400 unsupported_grant_type", () => {
  it.each(["password", "authorization_code", "refresh_token", "CLIENT_CREDENTIALS"])(
    "grant_type %j (form and JSON)",
    async (grant) => {
      expectOAuthError(
        await post(form({ ...CLIENT, grant_type: grant }), "application/x-www-form-urlencoded"),
        "unsupported_grant_type",
      );
      expectOAuthError(
        await post(JSON.stringify({ ...CLIENT, grant_type: grant }), "application/json"),
        "unsupported_grant_type",
      );
    },
  );
});

describe("token endpoint: other methods", () => {
  it.each(["GET", "PUT", "DELETE"])("%s /oauth/token is 405 in the error envelope, never a 500", async (method) => {
    const res = await post(undefined, undefined, {}, method);
    expect(res.status).toBe(405);
    expect(res.json.error.code).toBe("method_not_allowed");
    expect(issued).toEqual([]);
  });
});

describe("token endpoint: HTTP Basic client authentication at the edge", () => {
  const grant = form({ grant_type: "client_credentials" });

  it("the id and the secret of a Basic header reach auth decoded (RFC 6749 section 2.3.1), the body then holding grant_type alone", async () => {
    const enc = (v: string) => new URLSearchParams({ v }).toString().slice(2);
    const [id, secret] = ["cli_Basic:Client", "sk_live_a+b/c:d%e"];
    const res = await post(grant, "application/x-www-form-urlencoded", { authorization: basic(enc(id), enc(secret)) });
    expect(res.status).toBe(200);
    expect(issued).toEqual([{ clientId: id, clientSecret: secret }]);
  });

  it("both methods at once are invalid_request, even when both are right", async () => {
    const res = await post(form(CLIENT), "application/x-www-form-urlencoded", {
      authorization: basic(CLIENT.client_id, CLIENT.client_secret),
    });
    expectOAuthError(res, "invalid_request");
  });

  it.each([
    ["garbage", "Basic %%%"],
    ["no colon", `Basic ${Buffer.from("justanid").toString("base64")}`],
    ["empty secret", `Basic ${Buffer.from("cli_x:").toString("base64")}`],
    ["another scheme", "Bearer abc"],
    ["a header far too long for a credential", `Basic ${Buffer.from(`cli_x:${"s".repeat(4000)}`).toString("base64")}`],
  ])("a malformed Authorization header (%s) is 400 invalid_request, never a 5xx", async (_why, authorization) => {
    expectOAuthError(await post(grant, "application/x-www-form-urlencoded", { authorization }), "invalid_request");
  });

  it("the per-IP token limit counts Basic and body requests alike", async () => {
    // One client IP; half its budget by Basic, half by the body, all at once (inside one window).
    const from = { "x-forwarded-for": "203.0.113.7" };
    const byBasic = () =>
      edge.send("POST", "/oauth/token", {
        headers: {
          ...from,
          "content-type": "application/x-www-form-urlencoded",
          authorization: basic(CLIENT.client_id, CLIENT.client_secret),
        },
        body: grant,
      });
    const byBody = () =>
      edge.send("POST", "/oauth/token", {
        headers: { ...from, "content-type": "application/x-www-form-urlencoded" },
        body: form(CLIENT),
      });
    const answers = await Promise.all(
      Array.from({ length: TOKEN_BUDGET }, (_, i) => (i % 2 === 0 ? byBasic() : byBody())),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(TOKEN_BUDGET).fill(200));
    // Both kinds were counted: the budget is gone for either method.
    const after = [await byBasic(), await byBody()];
    expect(after.map((a) => a.status)).toEqual([429, 429]);
    expect(Number(after[0]!.headers["retry-after"])).toBeGreaterThanOrEqual(1);
    // Another client IP still has its own budget.
    expect(
      (
        await post(grant, "application/x-www-form-urlencoded", {
          authorization: basic(CLIENT.client_id, CLIENT.client_secret),
        })
      ).status,
    ).toBe(200);
  });
});
