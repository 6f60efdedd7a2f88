import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";

/** The OpenAPI document of the partner API: one file, served by the gateway and used by the tests. */
export const OPENAPI_FILE = fileURLToPath(new URL("../openapi/openapi.yaml", import.meta.url));

export interface OpenApiDocument {
  yaml: string;
  json: Record<string, unknown>;
}

let loaded: OpenApiDocument | undefined;

export function openApiDocument(): OpenApiDocument {
  if (!loaded) {
    const yaml = readFileSync(OPENAPI_FILE, "utf8");
    let json: Record<string, unknown> | undefined;
    // Parsed on first use, not at start: the parse is the slow part, and most gateways (every
    // in-memory one of the unit tests) never serve the JSON.
    loaded = {
      yaml,
      get json() {
        json ??= parse(yaml) as Record<string, unknown>;
        return json;
      },
    };
  }
  return loaded;
}
