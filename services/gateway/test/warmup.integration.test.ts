import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createLogger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import { startGateway } from "@pi/gateway";
import { as, testSettings } from "../../../test/support/services.js";

// A gateway whose auth service cannot be reached yet: it listens (liveness), is not ready, and
// answers partners with the 503 envelope rather than hanging or judging bearers without keys.
let gateway: RunningService;
let baseUrl: string;

beforeAll(async () => {
  const settings = testSettings({
    AUTH_SERVICE_URL: "http://127.0.0.1:1",
    CONNECTION_SERVICE_URL: "http://127.0.0.1:1",
    FILE_INTAKE_SERVICE_URL: "http://127.0.0.1:1",
    WEBHOOK_SERVICE_URL: "http://127.0.0.1:1",
  });
  gateway = await startGateway(as(settings, "gateway"), createLogger("gateway", "silent"));
  baseUrl = `http://127.0.0.1:${gateway.port}`;
});
afterAll(async () => {
  await gateway.stop();
});

describe("gateway warm-up", () => {
  it("is live at once, not ready, and answers /v1 with 503 service_unavailable and Retry-After", async () => {
    expect((await fetch(`${baseUrl}/healthz`)).status).toBe(200);
    const ready = await fetch(`${baseUrl}/readyz`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { failing: string[] }).failing).toEqual([
      "gateway",
      "auth",
      "connection",
      "file-intake",
      "webhook",
    ]);
    const res = await fetch(`${baseUrl}/v1/connections/con_x`, { headers: { authorization: "Bearer abc" } });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(((await res.json()) as { error: { code: string; type: string } }).error).toMatchObject({
      code: "service_unavailable",
      type: "api_error",
    });
  });
});

describe("requests the HTTP parser refuses", () => {
  it("get the error envelope, not a bare 400", async () => {
    const { connect } = await import("node:net");
    const reply = await new Promise<string>((resolve) => {
      const socket = connect(gateway.port, "127.0.0.1", () => socket.write("GARBAGE / HTTP/9\r\n\r\n"));
      let data = "";
      socket.on("data", (d) => (data += d.toString()));
      socket.on("close", () => resolve(data));
    });
    expect(reply).toMatch(/^HTTP\/1.1 400 /);
    expect(JSON.parse(reply.slice(reply.indexOf("\r\n\r\n") + 4))).toMatchObject({
      error: { code: "invalid_request", type: "invalid_request_error" },
    });
  });
});
