import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";

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
    // Parsed on first use: the slow part, which most gateways (all of the unit tests') never need.
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
