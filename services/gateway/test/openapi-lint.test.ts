import { describe, expect, it } from "@jest/globals";
import { createConfig, lint } from "@redocly/openapi-core";

// The OpenAPI document passes a mainstream linter's recommended rules (Redocly's `recommended`
// ruleset, the one `redocly lint` applies by default) with no problem at all, warnings included,
// but one: the two discovery documents (/.well-known/...) are static answers with no client error,
// so they document no 4XX (the rule would have us invent one).
const NO_CLIENT_ERROR =
  /^warn operation-4xx-response: .* at #\/paths\/~1\.well-known~1(oauth-authorization-server|smart-configuration)\/get\/responses$/;

describe("OpenAPI lint", () => {
  it("services/gateway/openapi/openapi.yaml has no problem under Redocly's recommended rules", async () => {
    const config = await createConfig({ extends: ["recommended"] });
    const problems = await lint({ ref: "services/gateway/openapi/openapi.yaml", config });
    const found = problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer ?? "?"}`);
    expect(found.filter((p) => !NO_CLIENT_ERROR.test(p))).toEqual([]);
  });

  it("the linter does find problems: a document without servers and with an undefined $ref fails", async () => {
    const { writeFileSync, mkdtempSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const bad = join(mkdtempSync(join(tmpdir(), "lint-")), "bad.yaml");
    writeFileSync(
      bad,
      "openapi: 3.1.0\ninfo: {title: t, version: '1'}\npaths:\n  /x:\n    get:\n      responses:\n        '200': {$ref: '#/components/responses/Nope'}\n",
    );
    const problems = await lint({ ref: bad, config: await createConfig({ extends: ["recommended"] }) });
    expect(problems.filter((p) => p.severity === "error").map((p) => p.ruleId)).toEqual(
      expect.arrayContaining(["no-empty-servers", "no-unresolved-refs"]),
    );
  });
});
