import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { openApiJson } from "../../services/gateway/src/openapi.js";

// Every answer the end-to-end suite receives is checked against the OpenAPI document
// (services/gateway/openapi/openapi.yaml) by call() and requestToken() in partner-api.ts: status
// documented for the operation, content type, body schema (JSON Schema 2020-12, as OpenAPI 3.1
// has it) and the documented required headers. A mismatch throws.

type Json = Record<string, unknown>;
type HeaderSource = Headers | Record<string, string | string[] | undefined>;

const doc = openApiJson() as Json;
const DOC_ID = "partner-api.json";

const ajv = new Ajv2020({ strict: false, allErrors: true });
const addFormats = addFormatsModule as unknown as (a: Ajv2020) => Ajv2020;
addFormats(ajv);
ajv.addFormat("binary", true);
ajv.addSchema(doc, DOC_ID);

export class OpenApiMismatch extends Error {
  override name = "OpenApiMismatch";
}

const pointer = (...parts: string[]) => `#/${parts.map((p) => p.replace(/~/g, "~0").replace(/\//g, "~1")).join("/")}`;

function at(ref: string): { value: Json; ref: string } {
  let value: unknown = doc;
  for (const part of ref.slice(2).split("/")) value = (value as Json)[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  if (value === undefined) throw new Error(`the OpenAPI document has nothing at ${ref}`);
  const object = value as Json;
  return typeof object.$ref === "string" ? at(object.$ref) : { value: object, ref };
}

const compiled = new Map<string, ValidateFunction>();
function validatorAt(ref: string): ValidateFunction {
  let v = compiled.get(ref);
  if (!v) {
    v = ajv.getSchema(`${DOC_ID}${ref}`);
    if (!v) throw new Error(`no schema at ${ref}`);
    compiled.set(ref, v);
  }
  return v;
}

const operations = Object.entries((doc.paths ?? {}) as Record<string, Json>).map(([template, item]) => ({
  template,
  pattern: new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`),
  item,
}));

const headerOf = (headers: HeaderSource, name: string): string | undefined => {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  const value = Object.entries(headers).find(([k]) => k.toLowerCase() === name.toLowerCase())?.[1];
  return Array.isArray(value) ? value.join(", ") : value;
};

const describe = (errors: ErrorObject[] | null | undefined) =>
  (errors ?? [])
    .map(
      (e) =>
        `${e.instancePath || "(body)"} ${e.message}${e.params && Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : ""}`,
    )
    .join("; ");

function checkAgainst(
  responseRef: string,
  where: string,
  headers: HeaderSource,
  body: string | undefined,
  skipBody: boolean,
) {
  const { value: response, ref } = at(responseRef);
  const problems: string[] = [];

  for (const [name, h] of Object.entries((response.headers ?? {}) as Record<string, Json>)) {
    const { value: header, ref: headerRef } = at(typeof h.$ref === "string" ? h.$ref : `${ref}/headers/${name}`);
    const raw = headerOf(headers, name);
    if (raw === undefined) {
      if (header.required === true) problems.push(`header ${name} is required and missing`);
      continue;
    }
    const schema = header.schema as Json | undefined;
    if (!schema) continue;
    let value: unknown = raw;
    if (schema.type === "integer" || schema.type === "number")
      value = /^-?[0-9]+(\.[0-9]+)?$/.test(raw.trim()) ? Number(raw) : raw;
    const validate = validatorAt(`${headerRef}/schema`);
    if (!validate(value)) problems.push(`header ${name}: ${JSON.stringify(raw)} ${describe(validate.errors)}`);
  }

  const content = response.content as Record<string, Json> | undefined;
  const contentType = headerOf(headers, "content-type")?.split(";")[0]?.trim().toLowerCase();
  if (!skipBody) {
    if (!content) {
      if (body) problems.push(`no body is documented, got ${JSON.stringify(body.slice(0, 200))}`);
    } else if (!contentType || !(contentType in content)) {
      problems.push(`content type ${contentType ?? "(none)"} is not one of ${Object.keys(content).join(", ")}`);
    } else if (contentType.endsWith("json")) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(body ?? "");
      } catch {
        problems.push(`the body is not JSON: ${JSON.stringify((body ?? "").slice(0, 200))}`);
      }
      if (parsed !== undefined) {
        const validate = validatorAt(`${ref}/content/${contentType.replace(/\//g, "~1")}/schema`);
        if (!validate(parsed)) problems.push(`body ${describe(validate.errors)}`);
      }
    }
  }
  if (problems.length > 0) {
    throw new OpenApiMismatch(
      `${where}: the answer strays from the OpenAPI document (${ref}): ${problems.join("; ")}; body: ${(body ?? "").slice(0, 500)}`,
    );
  }
}

const ERROR_ENVELOPE = pointer("components", "schemas", "ErrorEnvelope");

function checkEnvelope(where: string, status: number, headers: HeaderSource, body: string | undefined) {
  if (status < 400)
    throw new OpenApiMismatch(`${where}: a success (${status}) for an operation the OpenAPI document does not have`);
  const contentType = headerOf(headers, "content-type")?.split(";")[0]?.trim();
  let parsed: unknown;
  try {
    parsed = JSON.parse(body ?? "");
  } catch {
    parsed = undefined;
  }
  const validate = validatorAt(ERROR_ENVELOPE);
  if (contentType !== "application/json" || !validate(parsed)) {
    throw new OpenApiMismatch(
      `${where}: an error outside the document's operations must be the error envelope: ${describe(validate.errors)}; body: ${(body ?? "").slice(0, 500)}`,
    );
  }
}

/**
 * Throws OpenApiMismatch when an answer of the gateway strays from the OpenAPI document. Paths of
 * the partner API (/v1, /oauth) that the document lacks, and methods it lacks on its paths, must
 * answer an error in the envelope; other paths (/healthz, /docs, ...) are not the partner API.
 */
export function validateResponse(
  method: string,
  url: string,
  status: number,
  headers: HeaderSource,
  body: string | undefined,
): void {
  const path = new URL(url, "http://gateway.invalid").pathname;
  const m = method.toLowerCase();
  const where = `${method.toUpperCase()} ${path} -> ${status}`;
  const match = operations.find((o) => o.pattern.test(path));
  if (!match) {
    if (/^\/(v[0-9]+|oauth)(\/|$)/.test(path)) checkEnvelope(where, status, headers, body);
    return;
  }
  if (m === "options") return;
  const operation = match.item[m === "head" ? "get" : m] as Json | undefined;
  if (!operation) {
    if (status === 405 && !headerOf(headers, "allow"))
      throw new OpenApiMismatch(`${where}: a 405 without an Allow header`);
    checkEnvelope(where, status, headers, body);
    return;
  }
  const responses = (operation.responses ?? {}) as Record<string, unknown>;
  const key = [String(status), `${String(status)[0]}XX`, "default"].find((k) => k in responses);
  if (!key)
    throw new OpenApiMismatch(
      `${where}: status ${status} is not documented for ${method.toUpperCase()} ${match.template} (documented: ${Object.keys(responses).join(", ")}); body: ${(body ?? "").slice(0, 500)}`,
    );
  checkAgainst(
    pointer("paths", match.template, m === "head" ? "get" : m, "responses", key),
    where,
    headers,
    body,
    m === "head",
  );
}
