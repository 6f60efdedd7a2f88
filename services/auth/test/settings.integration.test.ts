import { describe, expect, it } from "@jest/globals";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { identityKey, TEST_PUBLIC_KEYS } from "../../../test/support/services.js";

// The compiled service, as an operator starts it (npm test builds first).
const main = join(process.cwd(), "services", "auth", "dist", "main.js");

const identity = { SERVICE_IDENTITY_KEY: identityKey("auth"), SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS };

describe("auth service settings", () => {
  it("without CREDENTIAL_PEPPER it exits non-zero with one line naming the setting", () => {
    const { CREDENTIAL_PEPPER: _, ...env } = process.env;
    const r = spawnSync(process.execPath, [main], {
      env: {
        ...env,
        ...identity,
        MONGODB_URI: process.env.TEST_MONGODB_URI,
        KAFKA_BROKERS: process.env.TEST_KAFKA_BROKERS,
        AUTH_SERVICE_PORT: "0",
        DATA_NAMESPACE: "tpepper",
      },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe("invalid setting CREDENTIAL_PEPPER: required by the auth service\n");
  });

  it("without DATA_KEYS (the KEKs that seal signing secrets and keys) it exits the same way, naming DATA_KEYS", () => {
    const { DATA_KEYS: _, ...env } = process.env;
    const r = spawnSync(process.execPath, [main], {
      env: {
        ...env,
        ...identity,
        CREDENTIAL_PEPPER: "p".repeat(40),
        MONGODB_URI: process.env.TEST_MONGODB_URI,
        KAFKA_BROKERS: process.env.TEST_KAFKA_BROKERS,
        AUTH_SERVICE_PORT: "0",
        DATA_NAMESPACE: "tdatakeys",
      },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe("invalid setting DATA_KEYS: required by the auth service\n");
  });

  it("a malformed setting stops it the same way", () => {
    const r = spawnSync(process.execPath, [main], {
      env: { ...process.env, AUTH_SERVICE_PORT: "fifty" },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^invalid setting AUTH_SERVICE_PORT: /);
  });

  it("without its own service identity, or with another workload's key, it exits non-zero with one line naming the setting", () => {
    const run = (extra: Record<string, string>) => {
      const { SERVICE_IDENTITY_KEY: _k, SERVICE_IDENTITY_PUBLIC_KEYS: _p, ...env } = process.env;
      return spawnSync(process.execPath, [main], {
        env: { ...env, AUTH_SERVICE_PORT: "0", ...extra },
        encoding: "utf8",
        timeout: 30_000,
      });
    };
    const missing = run({ SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS });
    expect(missing.status).toBe(2);
    expect(missing.stderr).toBe("invalid setting SERVICE_IDENTITY_KEY: required (the private key of auth)\n");
    const other = run({ SERVICE_IDENTITY_KEY: identityKey("gateway"), SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS });
    expect(other.status).toBe(2);
    expect(other.stderr).toBe("invalid setting SERVICE_IDENTITY_KEY: it is the key of gateway, not of auth\n");
    const noPublic = run({ SERVICE_IDENTITY_KEY: identityKey("auth") });
    expect(noPublic.status).toBe(2);
    expect(noPublic.stderr).toBe(
      "invalid setting SERVICE_IDENTITY_PUBLIC_KEYS: required (every workload's public key)\n",
    );
    const garbled = run({ SERVICE_IDENTITY_KEY: "auth:bm90IGEga2V5", SERVICE_IDENTITY_PUBLIC_KEYS: TEST_PUBLIC_KEYS });
    expect(garbled.status).toBe(2);
    expect(garbled.stderr).toMatch(/^invalid setting SERVICE_IDENTITY_KEY: [^\n]+\n$/);
  });
});
