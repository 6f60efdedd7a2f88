import { describe, expect, it } from "@jest/globals";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

// The compiled service, as an operator starts it (npm test builds first).
const main = join(process.cwd(), "services", "auth", "dist", "main.js");

describe("auth service settings", () => {
  it("without CREDENTIAL_PEPPER it exits non-zero with one line naming the setting", () => {
    const { CREDENTIAL_PEPPER: _, ...env } = process.env;
    const r = spawnSync(process.execPath, [main], {
      env: { ...env, MONGODB_URI: process.env.TEST_MONGODB_URI, KAFKA_BROKERS: process.env.TEST_KAFKA_BROKERS, AUTH_SERVICE_PORT: "0", DATA_NAMESPACE: "tpepper" },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe("invalid setting CREDENTIAL_PEPPER: required by the auth service\n");
  });

  it("without DATA_KEYS (the KEKs that seal signing secrets and keys) it exits the same way, naming DATA_KEYS", () => {
    const { DATA_KEYS: _, ...env } = process.env;
    const r = spawnSync(process.execPath, [main], {
      env: { ...env, CREDENTIAL_PEPPER: "p".repeat(40), MONGODB_URI: process.env.TEST_MONGODB_URI, KAFKA_BROKERS: process.env.TEST_KAFKA_BROKERS, AUTH_SERVICE_PORT: "0", DATA_NAMESPACE: "tdatakeys" },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe("invalid setting DATA_KEYS: required by the auth service\n");
  });

  it("a malformed setting stops it the same way", () => {
    const r = spawnSync(process.execPath, [main], { env: { ...process.env, AUTH_SERVICE_PORT: "fifty" }, encoding: "utf8", timeout: 30_000 });
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^invalid setting AUTH_SERVICE_PORT: /);
  });
});
