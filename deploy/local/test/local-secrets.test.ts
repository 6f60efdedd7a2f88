import { describe, expect, it } from "@jest/globals";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseDataKeys } from "@pi/common/store/data-keys";
import { localSecrets } from "../src/stack.js";

// The secrets `npm start` keeps under its STATE_DIR: generated once, kept across starts (the data
// depends on them), and DATA_KEYS added to a state directory from before it existed.

const withDir = (use: (dir: string) => void) => {
  const dir = mkdtempSync(join(tmpdir(), "pi-secrets-"));
  try {
    use(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

describe("the local stack's secrets", () => {
  it("are generated on first start (a pepper and one KEK, k1), readable by the owner only, and the same on every later start", () => {
    withDir((dir) => {
      const first = localSecrets(dir);
      expect(first.CREDENTIAL_PEPPER.length).toBeGreaterThanOrEqual(32);
      expect(parseDataKeys(first.DATA_KEYS).map((k) => k.kid)).toEqual(["k1"]);
      expect(statSync(join(dir, "secrets.json")).mode & 0o777).toBe(0o600);
      expect(localSecrets(dir)).toEqual(first);
    });
  });

  it("a state directory from before DATA_KEYS keeps its pepper and gets a KEK", () => {
    withDir((dir) => {
      writeFileSync(join(dir, "secrets.json"), JSON.stringify({ CREDENTIAL_PEPPER: "p".repeat(43) }), { mode: 0o600 });
      const secrets = localSecrets(dir);
      expect(secrets.CREDENTIAL_PEPPER).toBe("p".repeat(43));
      expect(JSON.parse(readFileSync(join(dir, "secrets.json"), "utf8"))).toEqual(secrets);
      expect(localSecrets(dir).DATA_KEYS).toBe(secrets.DATA_KEYS);
    });
  });

  it("a key rotated in by hand (a new key in front of k1) is kept as written", () => {
    withDir((dir) => {
      const k1 = localSecrets(dir).DATA_KEYS;
      const rotated = `k2:${Buffer.alloc(32, 1).toString("base64url")},${k1}`;
      const file = join(dir, "secrets.json");
      writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, "utf8")), DATA_KEYS: rotated }));
      expect(localSecrets(dir).DATA_KEYS).toBe(rotated);
    });
  });
});
