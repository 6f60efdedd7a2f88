import { readFileSync } from "node:fs";
import { parse } from "yaml";

/** Read at start: a gateway whose image lacks the document does not come up (the image check). */
export const openApiYaml = readFileSync(new URL("../openapi/openapi.yaml", import.meta.url), "utf8");

let json: Record<string, unknown> | undefined;

/** Parsed on first use: the slow part, which most gateways (all of the unit tests') never need. */
export function openApiJson(): Record<string, unknown> {
  json ??= parse(openApiYaml) as Record<string, unknown>;
  return json;
}
