import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "@jest/globals";

// `npm run lint` inside `npm test`: Biome's lint rules (biome.json) and its formatter over the whole
// repository, so that a finding or an unformatted file fails CI as one counted test.

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const biome = createRequire(import.meta.url).resolve("@biomejs/biome/bin/biome");

describe("the code's habits", () => {
  it("Biome finds nothing: every file formatted, no lint finding of any level", async () => {
    const { code, out } = await new Promise<{ code: number; out: string }>((done) =>
      execFile(
        process.execPath,
        [biome, "ci", "--error-on-warnings", "--colors=off", "--reporter=github", "--max-diagnostics=none", "."],
        { cwd: root, maxBuffer: 64 << 20 },
        (err, stdout, stderr) =>
          done({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, out: stdout + stderr }),
      ),
    );
    // One line per finding (::error / ::warning / ::notice): the file, the line and the rule.
    const findings = out
      .split("\n")
      .filter((line) => line.startsWith("::"))
      .map((line) => line.replace(/,endLine=.*?::/, " ").replace(`${root}/`, ""));
    expect(findings).toEqual([]);
    expect({ code, out: code === 0 ? "" : out }).toEqual({ code: 0, out: "" });
  }, 300_000);
});
