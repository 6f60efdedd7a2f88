import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { healthv1 } from "@pi/proto";
import { clientsFor, createLogger, LIVENESS, parseSettings, startConnectServer, type ConnectServer } from "@pi/common";

const { SERVING, NOT_SERVING } = healthv1.HealthCheckResponse_ServingStatus;
let healthy = true;
let server: ConnectServer;

beforeAll(async () => {
  server = await startConnectServer({ host: "127.0.0.1", port: 0, routes: () => {}, healthy: async () => healthy, logger: createLogger("test", "silent") });
});
afterAll(async () => {
  await server.close();
});

describe("grpc.health.v1 on every service", () => {
  it("readiness follows the dependencies; liveness only that the process serves", async () => {
    const health = clientsFor(parseSettings({})).health(`http://127.0.0.1:${server.port}`);
    healthy = true;
    expect((await health.check({})).status).toBe(SERVING);
    healthy = false;
    expect((await health.check({})).status).toBe(NOT_SERVING);
    expect((await health.check({ service: LIVENESS })).status).toBe(SERVING);
  });
});
