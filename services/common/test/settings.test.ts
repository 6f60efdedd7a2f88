import { describe, expect, it } from "@jest/globals";
import { parseSettings, SettingsError } from "../src/runtime/settings.js";

describe("settings", () => {
  it("has the operator contract's defaults", () => {
    const s = parseSettings({});
    expect(s.GATEWAY_PORT).toBe(8080);
    expect(s.ACCESS_TOKEN_TTL_SECONDS).toBe(900);
    expect(s.IDEMPOTENCY_TTL_SECONDS).toBe(86400);
    expect(s.CONNECTION_PENDING_TTL_SECONDS).toBe(2592000);
    expect(s.SANDBOX_APPROVAL_DELAY_SECONDS).toBe(30);
    expect(s.WEBHOOK_RETRY_WINDOW_SECONDS).toBe(86400);
    expect(s.MAX_FILE_BYTES).toBe(26214400);
    expect(s.RATE_LIMIT_V1_PER_SECOND).toBeGreaterThanOrEqual(50);
    expect(s.RATE_LIMIT_TOKEN_PER_MINUTE).toBeGreaterThanOrEqual(60);
  });

  it("keeps file data 30 days and test files' 1 day by default; DATA_KEYS and the peppers have no default", () => {
    const s = parseSettings({});
    expect(s.FILE_RETENTION_SECONDS).toBe(30 * 86400);
    expect(s.TEST_FILE_RETENTION_SECONDS).toBe(86400);
    expect(s.FILE_STORAGE_QUOTA_BYTES).toBe(10 * 1024 ** 3);
    expect(s.TEST_FILE_STORAGE_QUOTA_BYTES).toBe(256 * 1024 ** 2);
    expect(s.DATA_KEYS).toBeUndefined();
    expect(s.CREDENTIAL_PEPPERS).toBeUndefined();
  });

  it("keeps webhook events at least the 30 days partners are promised, and a partner's newest 10,000 test events", () => {
    const s = parseSettings({});
    expect(s.WEBHOOK_EVENT_RETENTION_SECONDS).toBe(30 * 86400);
    expect(s.WEBHOOK_TEST_EVENTS_PER_PARTNER).toBe(10_000);
    expect(parseSettings({ WEBHOOK_EVENT_RETENTION_SECONDS: String(90 * 86400) }).WEBHOOK_EVENT_RETENTION_SECONDS).toBe(
      90 * 86400,
    );
    expect(() => parseSettings({ WEBHOOK_EVENT_RETENTION_SECONDS: String(30 * 86400 - 1) })).toThrow(SettingsError);
  });

  it("reads DATA_KEYS and CREDENTIAL_PEPPERS lists", () => {
    const key = Buffer.alloc(32, 7).toString("base64");
    const s = parseSettings({ DATA_KEYS: `k2:${key},k1:${key}`, CREDENTIAL_PEPPERS: `p2:${"a".repeat(32)}` });
    expect(s.DATA_KEYS).toBe(`k2:${key},k1:${key}`);
    expect(s.CREDENTIAL_PEPPERS).toBe(`p2:${"a".repeat(32)}`);
  });

  it("reads values from the environment", () => {
    const s = parseSettings({ GATEWAY_PORT: "9000", WEBHOOK_ALLOW_INSECURE_URLS: "true", ADDRESS_DOMAIN: "care.test" });
    expect(s.GATEWAY_PORT).toBe(9000);
    expect(s.WEBHOOK_ALLOW_INSECURE_URLS).toBe(true);
    expect(s.ADDRESS_DOMAIN).toBe("care.test");
  });

  it.each([
    ["GATEWAY_PORT", "eighty"],
    ["GATEWAY_PORT", "70000"],
    ["RATE_LIMIT_V1_PER_SECOND", "10"],
    ["RATE_LIMIT_TOKEN_PER_MINUTE", "5"],
    ["MAX_FILE_BYTES", "-1"],
    ["WEBHOOK_ALLOW_INSECURE_URLS", "maybe"],
    ["MONGODB_URI", "http://localhost"],
    ["KAFKA_BROKERS", "localhost"],
    ["ADDRESS_DOMAIN", "Not A Domain"],
    ["CREDENTIAL_PEPPER", "short"],
    ["CREDENTIAL_PEPPERS", "p2:short"],
    ["CREDENTIAL_PEPPERS", "x".repeat(40)],
    ["DATA_KEYS", "k1:tooshort"],
    ["DATA_KEYS", "no-key-id"],
    ["FILE_RETENTION_SECONDS", "0"],
    ["TEST_FILE_RETENTION_SECONDS", "-5"],
    ["FILE_STORAGE_QUOTA_BYTES", "0"],
    ["TEST_FILE_STORAGE_QUOTA_BYTES", "1.5"],
    ["WEBHOOK_EVENT_RETENTION_SECONDS", "86400"],
    ["WEBHOOK_TEST_EVENTS_PER_PARTNER", "0"],
    ["AUTH_SERVICE_URL", "http://127.0.0.1:50051,"],
    ["FILE_INTAKE_SERVICE_URL", "https://file-intake:50053"],
  ])("rejects a bad %s (%s) with one line naming it", (name, value) => {
    let error: unknown;
    try {
      parseSettings({ [name]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(SettingsError);
    const message = (error as Error).message;
    expect(message).toMatch(new RegExp(`^invalid setting ${name}: `));
    expect(message).not.toContain("\n");
  });
});
