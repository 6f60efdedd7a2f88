import { afterEach, describe, expect, it } from "@jest/globals";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { startEdge, type Edge } from "./edge-harness.js";

// /readyz is the operator contract's readiness of the whole stack; /readyz/traffic is what a gateway
// pod's readiness probe asks: whether this gateway should take traffic at all.

let edge: Edge | undefined;
afterEach(async () => {
  await edge?.stop();
  edge = undefined;
});

const down = {
  check: () => {
    throw new RpcError("connect ECONNREFUSED", Status.UNAVAILABLE);
  },
};

describe("gateway readiness", () => {
  it("with a service behind it down, the gateway stays in rotation (/readyz/traffic 200) while /readyz names the service", async () => {
    edge = await startEdge({ health: down });
    const whole = await edge.send("GET", "/readyz");
    expect([whole.status, whole.json]).toEqual([503, { status: "not_ready", failing: ["auth"] }]);
    const traffic = await edge.send("GET", "/readyz/traffic");
    expect([traffic.status, traffic.json]).toEqual([200, { status: "ready" }]);
    expect(traffic.headers["cache-control"]).toBe("no-store");
  });

  it("a gateway still warming up takes no traffic (/readyz/traffic 503), whatever the services say", async () => {
    let warm = false;
    edge = await startEdge({ warm: () => warm });
    const cold = await edge.send("GET", "/readyz/traffic");
    expect([cold.status, cold.json]).toEqual([503, { status: "not_ready", failing: ["gateway"] }]);
    warm = true;
    expect((await edge.send("GET", "/readyz/traffic")).status).toBe(200);
  });
});
