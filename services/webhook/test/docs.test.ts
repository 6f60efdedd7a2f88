import { describe, expect, it } from "@jest/globals";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const root = join(process.cwd());

describe("docs/webhooks.md", () => {
  it("shows exactly the receiver that the tests use", () => {
    const source = readFileSync(join(root, "test", "support", "webhook-receiver.ts"), "utf8");
    const docs = readFileSync(join(root, "docs", "webhooks.md"), "utf8");
    const snippet = source.split("// docs:begin receiver\n")[1]!.split("// docs:end receiver\n")[0]!.trimEnd();
    expect(snippet).toContain("timingSafeEqual");
    expect(snippet.length).toBeGreaterThan(500);
    expect(docs).toContain(`\`\`\`ts\n${snippet}\n\`\`\``);
  });
});
