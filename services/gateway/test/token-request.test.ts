import { describe, expect, it } from "@jest/globals";
import { oauthError, parseTokenRequest } from "../src/routes/token.js";

// The token request (RFC 6749 section 4.4) as the spec's "Token request" table gives it.

const good = { grant_type: "client_credentials", client_id: "cli_x", client_secret: "sk_live_y" };

describe("token request parsing", () => {
  it("a complete request, with or without scope; unknown fields ignored", () => {
    expect(parseTokenRequest(good)).toEqual({ ok: true, req: good });
    expect(parseTokenRequest({ ...good, scope: "files:write", extra: 1 })).toEqual({ ok: true, req: { ...good, scope: "files:write" } });
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
    expect(parseTokenRequest({ ...good, client_id: ["cli_x", "cli_x"] })).toEqual({ ok: false, error: "invalid_request" });
  });

  it.each([null, "string", 7, ["a"]])("invalid_request for a body that is not an object: %j", (body) => {
    expect(parseTokenRequest(body)).toEqual({ ok: false, error: "invalid_request" });
  });

  it("unsupported_grant_type for any other grant, checked before the client fields", () => {
    expect(parseTokenRequest({ ...good, grant_type: "password" })).toEqual({ ok: false, error: "unsupported_grant_type" });
    expect(parseTokenRequest({ grant_type: "authorization_code" })).toEqual({ ok: false, error: "unsupported_grant_type" });
  });

  it("oversized fields are invalid_request, whoever the client is", () => {
    expect(parseTokenRequest({ ...good, client_id: "c".repeat(257) })).toEqual({ ok: false, error: "invalid_request" });
    expect(parseTokenRequest({ ...good, client_secret: "s".repeat(513) })).toEqual({ ok: false, error: "invalid_request" });
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
