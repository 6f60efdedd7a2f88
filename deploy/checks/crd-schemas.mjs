// Validation of custom resources against the OpenAPI schemas of their CRDs, vendored in deploy/crds
// (README there: which project, which version): the Prometheus Operator's ServiceMonitor and
// PrometheusRule, Gateway API's Gateway and HTTPRoute. kubernetes-models has the built-in kinds only.
//
// Like the API server with strict field validation (kubectl's default), a field the schema does not
// name is an error, except where the schema preserves unknown fields. The CEL rules
// (x-kubernetes-validations) are the API server's alone and not checked here.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Ajv from "ajv";
import addFormats from "ajv-formats";
import { parseAllDocuments } from "yaml";
import { repoRoot } from "./helm.mjs";

export const crdDir = join(repoRoot, "deploy", "crds");

/** Every vendored CRD file, by directory (project-version). */
export function crdFiles() {
  return readdirSync(crdDir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .flatMap((d) =>
      readdirSync(join(crdDir, d.name))
        .filter((f) => f.endsWith(".yaml"))
        .map((f) => join(crdDir, d.name, f)),
    );
}

/** Makes an OpenAPI schema refuse what it does not name (the API server's strict field validation). */
export function strict(schema, path = "") {
  if (!schema || typeof schema !== "object") return schema;
  const out = Array.isArray(schema) ? schema.map((s) => strict(s, path)) : { ...schema };
  if (Array.isArray(schema)) return out;
  for (const key of ["items", "additionalProperties", "not"])
    if (out[key] && typeof out[key] === "object") out[key] = strict(out[key], `${path}/${key}`);
  for (const key of ["anyOf", "oneOf", "allOf"])
    if (Array.isArray(out[key])) out[key] = out[key].map((s) => strict(s, path));
  if (out.properties) {
    out.properties = Object.fromEntries(
      Object.entries(out.properties).map(([k, v]) => [
        k,
        path === "" && k === "metadata" ? v : strict(v, `${path}/${k}`),
      ]),
    );
    if (out.type === "object" && !out["x-kubernetes-preserve-unknown-fields"] && out.additionalProperties === undefined)
      out.additionalProperties = false;
  }
  return out;
}

/** The CRDs' patterns are Go's (RE2): its inline (?i) is a flag here (they use it for whole patterns). */
export function goRegExp(pattern, flags) {
  return pattern.includes("(?i)")
    ? new RegExp(pattern.replaceAll("(?i)", ""), `${flags}i`)
    : new RegExp(pattern, flags);
}
goRegExp.code = 'require("./crd-schemas.mjs").goRegExp';

let validators;
/** apiVersion/kind -> ajv validator of the CRD's served versions. */
export function crdValidators() {
  if (validators) return validators;
  const ajv = new Ajv({ strict: false, allErrors: true, code: { regExp: goRegExp } });
  addFormats(ajv);
  validators = new Map();
  for (const file of crdFiles()) {
    for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
      const crd = doc.toJS();
      if (crd?.kind !== "CustomResourceDefinition") continue;
      for (const version of crd.spec.versions.filter((v) => v.served)) {
        const key = `${crd.spec.group}/${version.name}/${crd.spec.names.kind}`;
        validators.set(key, ajv.compile(strict(version.schema.openAPIV3Schema)));
      }
    }
  }
  return validators;
}

/** Problems of one object against its CRD's schema; undefined when no vendored CRD defines its kind. */
export function validateCustomResource(obj) {
  const validate = crdValidators().get(`${obj.apiVersion}/${obj.kind}`);
  if (!validate) return undefined;
  if (validate(obj)) return [];
  return validate.errors.map(
    (e) =>
      `${e.instancePath || "/"} ${e.message}${e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : ""}`,
  );
}
