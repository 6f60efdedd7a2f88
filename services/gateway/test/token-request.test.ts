import { describe, expect, it } from "@jest/globals";
import { oauthError, parseBasicAuthorization, parseTokenRequest } from "../src/routes/token.js";

// The token request (RFC 6749 section 4.4) as the spec's "Token request" table gives it.

const good = { grant_type: "client_credentials", client_id: "cli_x", client_secret: "sk_live_y" };

describe("token request parsing", () => {
  it("a complete request, with or without scope; unknown fields ignored", () => {
    const client = { clientId: "cli_x", clientSecret: "sk_live_y" };
    expect(parseTokenRequest(good)).toEqual({ ok: true, req: good, client });
    expect(parseTokenRequest({ ...good, scope: "files:write", extra: 1 })).toEqual({
      ok: true,
      req: { ...good, scope: "files:write" },
      client,
    });
  });

  it.each(["grant_type", "client_id", "client_secret"])("invalid_request when %s is missing or empty", (field) => {
    const without: Record<string, unknown> = { ...good };
    delete without[field];
    expect(parseTokenRequest(without)).toEqual({ ok: false, error: "invalid_request" });
    expect(parseTokenRequest({ ...good, [field]: "" })).toEqual({ ok: false, error: "invalid_request" });
  });

  it.each([42, null, true, ["x"], { a: 1 }])("invalid_request for a field of the wrong type: %j", (value) => {
    for (const field of ["grant_type", "client_id", "client_secret", "scope"]) {
      expect(parseTokenRequest({ ...good, [field]: value })).toEqual({ ok: false, error: "invalid_request" });
    }
  });

  it("a repeated form field arrives as an array: invalid_request", () => {
    expect(parseTokenRequest({ ...good, client_id: ["cli_x", "cli_x"] })).toEqual({
      ok: false,
      error: "invalid_request",
    });
  });

  it.each([null, "string", 7, ["a"]])("invalid_request for a body that is not an object: %j", (body) => {
    expect(parseTokenRequest(body)).toEqual({ ok: false, error: "invalid_request" });
  });

  it("unsupported_grant_type for any other grant, checked before the client fields", () => {
    expect(parseTokenRequest({ ...good, grant_type: "password" })).toEqual({
      ok: false,
      error: "unsupported_grant_type",
    });
    expect(parseTokenRequest({ grant_type: "authorization_code" })).toEqual({
      ok: false,
      error: "unsupported_grant_type",
    });
  });

  it("oversized fields are invalid_request, whoever the client is", () => {
    expect(parseTokenRequest({ ...good, client_id: "c".repeat(257) })).toEqual({ ok: false, error: "invalid_request" });
    expect(parseTokenRequest({ ...good, client_secret: "s".repeat(513) })).toEqual({
      ok: false,
      error: "invalid_request",
    });
    expect(parseTokenRequest({ ...good, scope: "s".repeat(1025) })).toEqual({ ok: false, error: "invalid_request" });
  });
});

describe("OAuth error bodies", () => {
  it("have exactly error and a fixed error_description, the same bytes whatever the cause", () => {
    for (const error of ["invalid_request", "unsupported_grant_type", "invalid_client", "invalid_scope"] as const) {
      const body = oauthError(error);
      expect(Object.keys(body)).toEqual(["error", "error_description"]);
      expect(JSON.stringify(oauthError(error))).toBe(JSON.stringify(body));
    }
  });
});

// RFC 6749 section 2.3.1: id and secret each form-urlencoded, joined by a colon, then base64.
const basic = (id: string, secret: string) =>
  `Basic ${Buffer.from(`${new URLSearchParams({ a: id }).toString().slice(2)}:${new URLSearchParams({ a: secret }).toString().slice(2)}`).toString("base64")}`;

describe("HTTP Basic client authentication", () => {
  const grant = { grant_type: "client_credentials" };

  it("a Basic header authenticates the client; the body then needs only grant_type (and scope)", () => {
    expect(parseTokenRequest({ ...grant, scope: "files:write" }, basic("cli_x", "sk_live_y"))).toEqual({
      ok: true,
      req: { ...grant, scope: "files:write" },
      client: { clientId: "cli_x", clientSecret: "sk_live_y" },
    });
  });

  it("decodes the form-urlencoding of id and secret (RFC 6749 appendix B), colons and plus signs included", () => {
    expect(parseBasicAuthorization(basic("cli:a b", "s+e:c%r/t=="))).toEqual({
      clientId: "cli:a b",
      clientSecret: "s+e:c%r/t==",
    });
    // The scheme is case-insensitive; the secret may hold a raw colon after the first.
    expect(parseBasicAuthorization(`bAsIc ${Buffer.from("cli_x:sk:1").toString("base64")}`)).toEqual({
      clientId: "cli_x",
      clientSecret: "sk:1",
    });
  });

  it.each([
    ["no colon", `Basic ${Buffer.from("cli_x").toString("base64")}`],
    ["empty id", `Basic ${Buffer.from(":secret").toString("base64")}`],
    ["empty secret", `Basic ${Buffer.from("cli_x:").toString("base64")}`],
    ["not base64", "Basic ***"],
    ["base64 without its padding", `Basic ${Buffer.from("cli_x:sk").toString("base64").replace(/=+$/, "")}`],
    ["two tokens", `Basic ${Buffer.from("a:b").toString("base64")} ${Buffer.from("a:b").toString("base64")}`],
    ["a malformed %-escape", `Basic ${Buffer.from("cli_x:%zz").toString("base64")}`],
    ["bytes that are not UTF-8", `Basic ${Buffer.from([0x63, 0x3a, 0xff, 0xfe]).toString("base64")}`],
    ["no credentials at all", "Basic"],
    ["another scheme", "Bearer abc.def.ghi"],
    ["an empty header", ""],
  ])("a malformed Authorization header is invalid_request: %s", (_why, header) => {
    expect(parseTokenRequest(grant, header)).toEqual({ ok: false, error: "invalid_request" });
  });

  it("both methods at once are invalid_request (RFC 6749: one method per request)", () => {
    expect(
      parseTokenRequest({ ...grant, client_id: "cli_x", client_secret: "sk_live_y" }, basic("cli_x", "sk_live_y")),
    ).toEqual({ ok: false, error: "invalid_request" });
    expect(parseTokenRequest({ ...grant, client_secret: "sk_live_y" }, basic("cli_x", "sk_live_y"))).toEqual({
      ok: false,
      error: "invalid_request",
    });
  });

  it("a body client_id beside Basic must name the same client", () => {
    expect(parseTokenRequest({ ...grant, client_id: "cli_x" }, basic("cli_x", "sk_live_y"))).toMatchObject({
      ok: true,
      client: { clientId: "cli_x", clientSecret: "sk_live_y" },
    });
    expect(parseTokenRequest({ ...grant, client_id: "cli_other" }, basic("cli_x", "sk_live_y"))).toEqual({
      ok: false,
      error: "invalid_request",
    });
  });

  it("the grant type is still checked first, and the length limits hold for Basic too", () => {
    expect(parseTokenRequest({ grant_type: "password" }, "Basic ***")).toEqual({
      ok: false,
      error: "unsupported_grant_type",
    });
    expect(parseTokenRequest(grant, basic("c".repeat(257), "s"))).toEqual({ ok: false, error: "invalid_request" });
    expect(parseTokenRequest(grant, basic("c", "s".repeat(513)))).toEqual({ ok: false, error: "invalid_request" });
  });

  it("without a header, the body fields are the method", () => {
    expect(parseTokenRequest({ ...grant, client_id: "a", client_secret: "b" })).toMatchObject({
      ok: true,
      client: { clientId: "a", clientSecret: "b" },
    });
    expect(parseTokenRequest({ ...grant, client_id: "a" })).toEqual({ ok: false, error: "invalid_request" });
  });
});

describe("token request with a client assertion (private_key_jwt, RFC 7523 section 2.2)", () => {
  const type = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
  const grant = { grant_type: "client_credentials" };
  const assertion = "eyJhbGciOiJFUzM4NCIsImtpZCI6ImsxIn0.e30.c2ln";

  it("the assertion goes to auth as it came, with the body's client_id if any; its content is auth's to judge", () => {
    expect(parseTokenRequest({ ...grant, client_assertion_type: type, client_assertion: assertion })).toMatchObject({
      ok: true,
      client: { clientId: "", clientSecret: "", assertion },
    });
    expect(
      parseTokenRequest({ ...grant, client_id: "cli_x", client_assertion_type: type, client_assertion: "not a jwt" }),
    ).toMatchObject({
      ok: true,
      client: { clientId: "cli_x", assertion: "not a jwt" },
    });
  });

  it.each<[string, Record<string, string>, string | undefined]>([
    ["an assertion without its type", { client_assertion: assertion }, undefined],
    ["a type without an assertion", { client_assertion_type: type }, undefined],
    ["an empty assertion", { client_assertion_type: type, client_assertion: "" }, undefined],
    [
      "another assertion type (SAML 2.0)",
      {
        client_assertion_type: "urn:ietf:params:oauth:client-assertion-type:saml2-bearer",
        client_assertion: assertion,
      },
      undefined,
    ],
    [
      "an assertion and a client_secret (two methods)",
      { client_assertion_type: type, client_assertion: assertion, client_secret: "sk_live_y" },
      undefined,
    ],
    [
      "an assertion and HTTP Basic (two methods)",
      { client_assertion_type: type, client_assertion: assertion },
      `Basic ${Buffer.from("cli_x:sk").toString("base64")}`,
    ],
    [
      "an assertion over 8192 characters",
      { client_assertion_type: type, client_assertion: "a".repeat(8193) },
      undefined,
    ],
  ])("invalid_request for %s", (_what, fields, authorization) => {
    expect(parseTokenRequest({ ...grant, ...fields }, authorization)).toEqual({ ok: false, error: "invalid_request" });
  });
});
