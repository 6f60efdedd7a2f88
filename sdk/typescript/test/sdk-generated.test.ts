import { describe, expect, it } from "@jest/globals";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// The SDK's types are generated from the OpenAPI document, never written by hand: the committed
// file must be what openapi-typescript makes of the document now.

describe("SDK types", () => {
  it("src/gen/api.ts is openapi-typescript's output for services/gateway/openapi/openapi.yaml", () => {
    const out = join(mkdtempSync(join(tmpdir(), "sdk-gen-")), "api.ts");
    execFileSync(
      process.execPath,
      [
        join("node_modules", "openapi-typescript", "bin", "cli.js"),
        join("services", "gateway", "openapi", "openapi.yaml"),
        "-o",
        out,
      ],
      { stdio: "ignore" },
    );
    expect(readFileSync(out, "utf8")).toBe(readFileSync(join("sdk", "typescript", "src", "gen", "api.ts"), "utf8"));
  }, 60_000);
});
