import { describe, expect, it } from "@jest/globals";
import { OpenApiMismatch, validateResponse } from "./openapi.js";

// The e2e suite checks every answer against the OpenAPI document (call() and requestToken() run
// validateResponse): the check itself fails on answers that stray from the document.

const json = { "content-type": "application/json; charset=utf-8" };
const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
const envelope = (code: string, type: string) => JSON.stringify({ error: { type, code, message: "..." } });

describe("validateResponse (the e2e suite's check against the OpenAPI document)", () => {
  it("accepts answers the document describes", () => {
    expect(() =>
      validateResponse("GET", `/v1/connections/${CON}`, 200, json, JSON.stringify({ id: CON, status: "approved" })),
    ).not.toThrow();
    expect(() =>
      validateResponse("POST", "/v1/connections", 202, json, JSON.stringify({ id: CON, status: "pending" })),
    ).not.toThrow();
    expect(() =>
      validateResponse(
        "POST",
        "/oauth/token",
        200,
        { ...json, "cache-control": "no-store" },
        JSON.stringify({ access_token: "ey.x.y", token_type: "Bearer", expires_in: 900, scope: "files:write" }),
      ),
    ).not.toThrow();
    expect(() =>
      validateResponse(
        "POST",
        "/oauth/token",
        400,
        json,
        JSON.stringify({ error: "invalid_client", error_description: "Client authentication failed." }),
      ),
    ).not.toThrow();
    expect(() =>
      validateResponse(
        "POST",
        "/v1/files",
        429,
        { ...json, "retry-after": "1" },
        envelope("rate_limited", "rate_limit_error"),
      ),
    ).not.toThrow();
    expect(() =>
      validateResponse("GET", "/v1/nothing", 404, json, envelope("not_found", "invalid_request_error")),
    ).not.toThrow();
    expect(() =>
      validateResponse(
        "PUT",
        "/v1/files",
        405,
        { ...json, allow: "POST" },
        envelope("method_not_allowed", "invalid_request_error"),
      ),
    ).not.toThrow();
    expect(() => validateResponse("GET", "/healthz", 200, json, '{"status":"ok"}')).not.toThrow();
    const evt = {
      id: "evt_3kQ9tTg1YwZc8xXb0aL7Rm",
      type: "connection.approved",
      created: 1767225600,
      data: { connection_id: CON, status: "approved" },
    };
    expect(() =>
      validateResponse("GET", "/v1/events?limit=2", 200, json, JSON.stringify({ data: [evt], has_more: false })),
    ).not.toThrow();
    expect(() =>
      validateResponse(
        "GET",
        "/v1/events",
        400,
        json,
        JSON.stringify({
          error: { type: "invalid_request_error", code: "invalid_request", message: "...", param: "type" },
        }),
      ),
    ).not.toThrow();
  });

  it.each([
    [
      "a property the resource does not have",
      "GET",
      `/v1/connections/${CON}`,
      200,
      json,
      JSON.stringify({ id: CON, status: "approved", elder: "a.b.c@elders.example" }),
    ],
    [
      "the internal status declined",
      "GET",
      `/v1/connections/${CON}`,
      200,
      json,
      JSON.stringify({ id: CON, status: "declined" }),
    ],
    [
      "an id without its prefix",
      "GET",
      `/v1/connections/${CON}`,
      200,
      json,
      JSON.stringify({ id: "3kT9xQ2mVb7LpR4sN8wZcY", status: "approved" }),
    ],
    ["a missing field", "GET", "/v1/files/file_abc", 200, json, JSON.stringify({ id: "file_abc" })],
    [
      "a status the operation does not document",
      "GET",
      `/v1/connections/${CON}`,
      409,
      json,
      envelope("idempotency_key_reuse", "invalid_request_error"),
    ],
    [
      "a 429 without Retry-After",
      "GET",
      `/v1/connections/${CON}`,
      429,
      json,
      envelope("rate_limited", "rate_limit_error"),
    ],
    [
      "a 429 with a date in Retry-After",
      "POST",
      "/oauth/token",
      429,
      { ...json, "retry-after": "Wed, 21 Oct 2026 07:28:00 GMT" },
      envelope("rate_limited", "rate_limit_error"),
    ],
    [
      "an error in the wrong shape",
      "GET",
      `/v1/connections/${CON}`,
      404,
      json,
      JSON.stringify({ message: "Not Found" }),
    ],
    [
      "the wrong code for the status",
      "GET",
      `/v1/connections/${CON}`,
      404,
      json,
      envelope("unauthorized", "authentication_error"),
    ],
    [
      "a token error in the envelope",
      "POST",
      "/oauth/token",
      400,
      json,
      envelope("invalid_request", "invalid_request_error"),
    ],
    [
      "an OAuth error value that does not exist",
      "POST",
      "/oauth/token",
      400,
      json,
      JSON.stringify({ error: "access_denied" }),
    ],
    ["HTML for JSON", "GET", `/v1/connections/${CON}`, 200, { "content-type": "text/html" }, "<h1>ok</h1>"],
    ["a body that is not JSON", "GET", `/v1/connections/${CON}`, 200, json, "{"],
    [
      "a plain-text 404 outside the operations",
      "GET",
      "/v1/elders",
      404,
      { "content-type": "text/plain" },
      "Not Found",
    ],
    ["a 405 without Allow", "PATCH", "/v1/files", 405, json, envelope("method_not_allowed", "invalid_request_error")],
    ["a success for an operation the document does not have", "GET", "/v1/elders", 200, json, "{}"],
    ["an event list without has_more", "GET", "/v1/events", 200, json, JSON.stringify({ data: [] })],
    [
      "a declined event in the list",
      "GET",
      "/v1/events",
      200,
      json,
      JSON.stringify({
        data: [
          { id: "evt_a", type: "connection.declined", created: 1, data: { connection_id: CON, status: "pending" } },
        ],
        has_more: false,
      }),
    ],
    [
      "an event list with a field the document does not have",
      "GET",
      "/v1/events",
      200,
      json,
      JSON.stringify({ object: "list", data: [], has_more: false }),
    ],
  ])("fails on %s", (_name, method, path, status, headers, body) => {
    expect(() => validateResponse(method, path, status, headers, body)).toThrow(OpenApiMismatch);
  });
});
