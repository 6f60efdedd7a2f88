import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectionv1 } from "@pi/proto";
import { httpServerDuration, metricsRegistry } from "@pi/common/runtime/metrics";
import { startEdge, type Edge } from "./edge-harness.js";

// http_server_request_duration_seconds (docs/observability.md, "Metrics"): labelled by the route
// template, never the raw path, whatever a partner sends (an id, an unknown path, a made-up method),
// also for a request refused before its route ran.

const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
let edge: Edge;

beforeAll(async () => {
  edge = await startEdge({
    connections: { getConnection: () => ({ connection: { id: CON, status: connectionv1.ExternalStatus.APPROVED } }) },
  });
});
afterAll(() => edge.stop());

const countOf = async (labels: Record<string, string | number>) =>
  (await httpServerDuration.get()).values
    .filter(
      (v) =>
        v.metricName === "http_server_request_duration_seconds_count" &&
        Object.entries(labels).every(([k, x]) => String(v.labels[k]) === String(x)),
    )
    .reduce((n, v) => n + v.value, 0);

describe("http_server_request_duration_seconds", () => {
  it("counts a request under its route template, status and method", async () => {
    const before = await countOf({
      http_route: "/v1/connections/{id}",
      http_request_method: "GET",
      http_response_status_code: 200,
    });
    const token = await edge.token("ptr_1");
    expect(
      (await edge.send("GET", `/v1/connections/${CON}`, { headers: { authorization: `Bearer ${token}` } })).status,
    ).toBe(200);
    expect(
      await countOf({ http_route: "/v1/connections/{id}", http_request_method: "GET", http_response_status_code: 200 }),
    ).toBe(before + 1);
  });

  it("a request refused before its route ran (401) still counts under the template", async () => {
    const before = await countOf({ http_route: "/v1/files/{id}", http_response_status_code: 401 });
    expect((await edge.send("GET", "/v1/files/file_whatever")).status).toBe(401);
    expect(await countOf({ http_route: "/v1/files/{id}", http_response_status_code: 401 })).toBe(before + 1);
  });

  it("no label ever carries what a partner sent: an id, an unknown path, an unknown method", async () => {
    await edge.send("GET", "/v1/somewhere/else/file_abc");
    // A method HTTP knows and the API does not (Node's parser itself refuses one it does not know).
    await edge.send("PROPFIND", "/v1/connections");
    const text = await metricsRegistry.metrics();
    const lines = text.split("\n").filter((l) => l.startsWith("http_server_request_duration_seconds"));
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) {
      expect(line).not.toMatch(/con_|file_|somewhere|PROPFIND/);
      const route = /http_route="([^"]*)"/.exec(line)?.[1];
      expect([
        "",
        "/healthz",
        "/readyz",
        "/readyz/traffic",
        "/oauth/token",
        "/v1/connections",
        "/v1/connections/{id}",
        "/v1/files",
        "/v1/files/{id}",
        "/openapi.yaml",
        "/openapi.json",
        "/docs",
        "/docs/reference.js",
        "/docs/{asset}",
      ]).toContain(route);
    }
    expect(await countOf({ http_request_method: "_OTHER", http_route: "/v1/connections" })).toBeGreaterThanOrEqual(1);
  });
});
