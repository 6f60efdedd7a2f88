import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { healthv1 } from "@pi/proto";
import { closeClient } from "../src/rpc/client.js";
import { clientsFor } from "../src/rpc/clients.js";
import { createLogger } from "../src/runtime/logger.js";
import { LIVENESS, startRpcServer, TRAFFIC, type RpcServer } from "../src/rpc/server.js";
import { parseSettings } from "../src/runtime/settings.js";
import { TEST_PUBLIC_KEYS } from "../../../test/support/services.js";

const { SERVING, NOT_SERVING } = healthv1.HealthCheckResponse_ServingStatus;
let healthy = true;
let kafkaUp = true;
let server: RpcServer;
const clients: object[] = [];
const healthClient = () => {
  const client = clientsFor(parseSettings({})).health(`http://127.0.0.1:${server.port}`);
  clients.push(client);
  return client;
};

beforeAll(async () => {
  server = await startRpcServer({
    service: "auth",
    publicKeys: TEST_PUBLIC_KEYS,
    host: "127.0.0.1",
    port: 0,
    routes: () => {},
    healthy: async (withKafka) => healthy && (!withKafka || kafkaUp),
    logger: createLogger("test", "silent"),
  });
});
afterAll(async () => {
  for (const client of clients) closeClient(client);
  await server.close();
});

describe("grpc.health.v1 on every service", () => {
  it("readiness follows the dependencies; liveness only that the process serves; no service identity needed", async () => {
    // No SERVICE_IDENTITY_KEY: health checks stay open to probes.
    const health = healthClient();
    healthy = true;
    expect((await health.check({})).status).toBe(SERVING);
    healthy = false;
    expect((await health.check({})).status).toBe(NOT_SERVING);
    expect((await health.check({ service: LIVENESS })).status).toBe(SERVING);
  });

  it("a pod's readiness (service name traffic) leaves Kafka out: with Kafka down the replica still takes calls, the whole is not ready", async () => {
    const health = healthClient();
    healthy = true;
    kafkaUp = false;
    expect((await health.check({ service: TRAFFIC })).status).toBe(SERVING);
    expect((await health.check({})).status).toBe(NOT_SERVING);
    healthy = false;
    expect((await health.check({ service: TRAFFIC })).status).toBe(NOT_SERVING);
    kafkaUp = true;
    healthy = true;
  });
});
