import { describe, expect, it } from "@jest/globals";
import { Validator } from "@seriousme/openapi-schema-validator";
import { PARTNER_ERRORS, type PartnerErrorCode } from "../src/errors.js";
import { openApiJson } from "../src/openapi.js";

// The OpenAPI document (services/gateway/openapi/openapi.yaml) against the spec it describes and
// the gateway's one error table.

type Json = Record<string, any>;
const doc = openApiJson() as Json;

function deref(node: Json): Json {
  if (typeof node.$ref !== "string") return node;
  let value: Json = doc;
  for (const part of node.$ref.slice(2).split("/")) value = value[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  return deref(value);
}

const operations = Object.entries(doc.paths as Json).flatMap(([path, item]) =>
  Object.entries(item as Json)
    .filter(([method]) => ["get", "post", "put", "patch", "delete"].includes(method))
    .map(([method, op]) => ({ path, method, op: op as Json })),
);

/** The code and type an error response's schema fixes (allOf: envelope + const/enum). */
function errorCodes(response: Json): { codes: string[]; type: string } | undefined {
  const schema = deref(response).content?.["application/json"]?.schema;
  const fixed = schema && deref(schema).allOf?.[1]?.properties?.error?.properties;
  if (!fixed) return undefined;
  return { codes: fixed.code.const !== undefined ? [fixed.code.const] : fixed.code.enum, type: fixed.type.const };
}

describe("the OpenAPI document", () => {
  it("is a valid OpenAPI 3.1 document", async () => {
    const result = await new Validator().validate(doc as never);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(doc.openapi).toMatch(/^3\.1\./);
  });

  it("has exactly the thirteen operations of v1: the token endpoint, its two discovery documents, the five /v1 operations of the spec, the events list and the four test helpers", () => {
    expect(operations.map((o) => `${o.method.toUpperCase()} ${o.path}`).sort()).toEqual(
      [
        "POST /oauth/token",
        "GET /.well-known/oauth-authorization-server",
        "GET /.well-known/smart-configuration",
        "POST /v1/connections",
        "GET /v1/connections/{id}",
        "DELETE /v1/connections/{id}",
        "POST /v1/files",
        "GET /v1/files/{id}",
        "GET /v1/events",
        "POST /v1/test_helpers/connections/{id}/approve",
        "POST /v1/test_helpers/connections/{id}/sever",
        "POST /v1/test_helpers/connections/{id}/decline",
        "POST /v1/test_helpers/connections/{id}/expire",
      ].sort(),
    );
    expect(new Set(operations.map((o) => o.op.operationId)).size).toBe(13);
  });

  it("puts the test helpers under a tag of their own, marked test-mode only, and nothing else under it", () => {
    const tag = doc.tags.find((t: Json) => t.name === "Test helpers");
    expect(tag).toMatchObject({
      "x-test-mode-only": true,
      description: expect.stringMatching(/^\*\*Test mode only\.\*\*/),
    });
    const helpers = operations.filter((o) => o.path.startsWith("/v1/test_helpers/"));
    expect(helpers).toHaveLength(4);
    for (const { path, op } of operations) {
      const isHelper = path.startsWith("/v1/test_helpers/");
      expect([path, op.tags.includes("Test helpers"), op["x-test-mode-only"] === true]).toEqual([
        path,
        isHelper,
        isHelper,
      ]);
    }
  });

  it("takes the token request as form-urlencoded and as JSON, with the client authenticated by HTTP Basic or the body, and needs no bearer there", () => {
    const token = doc.paths["/oauth/token"].post;
    expect(Object.keys(token.requestBody.content).sort()).toEqual([
      "application/json",
      "application/x-www-form-urlencoded",
    ]);
    expect(token.security).toEqual([{ clientBasic: [] }, {}]);
    expect(doc.components.securitySchemes.clientBasic).toMatchObject({ type: "http", scheme: "basic" });
    expect(doc.components.schemas.TokenRequest.required).toEqual(["grant_type"]);
    expect(deref(token.responses["400"]).content["application/json"].schema.$ref).toBe(
      "#/components/schemas/OAuthError",
    );
    expect(errorCodes(token.responses["429"])).toEqual({ codes: ["rate_limited"], type: "rate_limit_error" });
  });

  it("requires a bearer JWT on every /v1 operation", () => {
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({
      type: "http",
      scheme: "bearer",
      bearerFormat: "JWT",
    });
    for (const { path, op } of operations.filter((o) => o.path.startsWith("/v1"))) {
      expect([path, (op.security ?? doc.security).map((s: Json) => Object.keys(s))]).toEqual([path, [["bearerAuth"]]]);
      expect([path, Object.keys(op.responses)]).toEqual([path, expect.arrayContaining(["401", "403", "429"])]);
    }
  });

  it("lists every status of the spec for each operation", () => {
    const statuses = (method: string, path: string) => Object.keys(doc.paths[path][method].responses).sort();
    expect(statuses("post", "/oauth/token")).toEqual(expect.arrayContaining(["200", "400", "429"]));
    expect(statuses("post", "/v1/connections")).toEqual(expect.arrayContaining(["202", "400", "401", "403", "429"]));
    expect(statuses("get", "/v1/connections/{id}")).toEqual(
      expect.arrayContaining(["200", "401", "403", "404", "429"]),
    );
    expect(statuses("delete", "/v1/connections/{id}")).toEqual(
      expect.arrayContaining(["200", "401", "403", "404", "429"]),
    );
    expect(statuses("post", "/v1/files")).toEqual(
      expect.arrayContaining(["202", "400", "401", "403", "409", "413", "415", "429"]),
    );
    expect(statuses("get", "/v1/files/{id}")).toEqual(expect.arrayContaining(["200", "401", "403", "404", "429"]));
    expect(statuses("get", "/v1/events")).toEqual(expect.arrayContaining(["200", "400", "401", "403", "429"]));
  });

  it("gives every error response the status, code and type of the gateway's error table (errors.ts)", () => {
    let checked = 0;
    for (const { path, method, op } of operations) {
      for (const [status, response] of Object.entries(op.responses as Json)) {
        const fixed = errorCodes(response as Json);
        if (!fixed) continue;
        for (const code of fixed.codes) {
          const def = PARTNER_ERRORS[code as PartnerErrorCode];
          expect([method, path, code, def && String(def.status), def?.type]).toEqual([
            method,
            path,
            code,
            status,
            fixed.type,
          ]);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(30);
  });

  it("puts Retry-After (an integer of at least 1, required) on every 429 and 503", () => {
    // The discovery documents are static answers of the gateway alone: no limit, no dependency.
    for (const { path, op } of operations.filter((o) => !o.path.startsWith("/.well-known/"))) {
      for (const status of ["429", "503"]) {
        const header = deref(deref(op.responses[status]).headers["Retry-After"]);
        expect([path, status, header.required, header.schema]).toEqual([
          path,
          status,
          true,
          { type: "integer", minimum: 1 },
        ]);
      }
    }
  });

  it("forbids additional properties where the spec says 'no additional properties'", () => {
    const schemas = doc.components.schemas;
    for (const name of ["Connection", "ConnectionCreateRequest", "File", "WebhookEvent", "EventList"]) {
      expect([name, schemas[name].additionalProperties]).toEqual([name, false]);
    }
    expect(schemas.WebhookEvent.properties.data.additionalProperties).toBe(false);
    expect(schemas.ConnectionCreateRequest.properties.elder.$ref).toBe("#/components/schemas/ElderAddress");
    expect(schemas.ElderAddress.maxLength).toBe(255);
  });

  it("gives ids their prefixes: con_, file_, evt_", () => {
    const schemas = doc.components.schemas;
    expect(new RegExp(schemas.ConnectionId.pattern).test("con_3kT9xQ2mVb7LpR4sN8wZcY")).toBe(true);
    expect(new RegExp(schemas.ConnectionId.pattern).test("file_3kT9xQ2mVb7LpR4sN8wZcY")).toBe(false);
    expect(new RegExp(schemas.FileId.pattern).test("file_3kT9xQ2mVb7LpR4sN8wZcY")).toBe(true);
    expect(new RegExp(schemas.EventId.pattern).test("evt_3kT9xQ2mVb7LpR4sN8wZcY")).toBe(true);
    expect(new RegExp(schemas.EventId.pattern).test("con_3kT9xQ2mVb7LpR4sN8wZcY")).toBe(false);
  });

  it("has the two webhook events, signed with Service-Signature", () => {
    expect(Object.keys(doc.webhooks).sort()).toEqual(["connection.approved", "connection.revoked"]);
    for (const hook of Object.values(doc.webhooks as Json)) {
      const signature = deref(hook.post.parameters[0]);
      expect(signature).toMatchObject({ name: "Service-Signature", in: "header", required: true });
      expect(new RegExp(signature.schema.pattern).test(`t=1700000000,v1=${"ab".repeat(32)}`)).toBe(true);
      // During a signing-secret rotation's overlap: one v1 per valid secret.
      expect(
        new RegExp(signature.schema.pattern).test(`t=1700000000,v1=${"ab".repeat(32)},v1=${"cd".repeat(32)}`),
      ).toBe(true);
      expect(signature.description).toMatch(/rotation/);
    }
    expect(doc.components.schemas.WebhookEvent.properties.type.enum).toEqual([
      "connection.approved",
      "connection.revoked",
    ]);
  });
});
