import { describe, expect, it } from "@jest/globals";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

describe("generated protobuf code", () => {
  it("passes buf lint and equals a fresh generation", () => {
    const r = spawnSync(process.execPath, [join(process.cwd(), "proto", "generate.mjs"), "--check"], {
      encoding: "utf8",
    });
    expect(r.stderr).toBe("");
    expect(r.stdout).toContain("generated code is current");
    expect(r.status).toBe(0);
  });
});
