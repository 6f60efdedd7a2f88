import { afterEach, describe, expect, it } from "@jest/globals";
import { connectionv1 } from "@pi/proto";
import { ConnectionLeases } from "../src/connection-leases.js";
import { startEdge, type Edge } from "./edge-harness.js";

describe("connection read leases in the gateway", () => {
  it("holds a status until its lease ends, counted from before the request", () => {
    let clock = 1000;
    const leases = new ConnectionLeases(10, () => clock);
    const askedAt = leases.start();
    clock = 1200; // the answer came 200 ms later
    leases.hold("ptr_a", "live", "con_1", "approved", askedAt, 1000);
    expect(leases.get("ptr_a", "live", "con_1")).toBe("approved");
    expect(leases.get("ptr_a", "test", "con_1")).toBeUndefined();
    expect(leases.get("ptr_b", "live", "con_1")).toBeUndefined();
    clock = 1999;
    expect(leases.get("ptr_a", "live", "con_1")).toBe("approved");
    clock = 2000;
    expect(leases.get("ptr_a", "live", "con_1")).toBeUndefined();
  });

  it("holds nothing without a lease, forgets on the partner's own DELETE, and keeps at most its bound", () => {
    const leases = new ConnectionLeases(2, () => 0);
    leases.hold("ptr_a", "live", "con_0", "approved", 0, 0);
    expect(leases.get("ptr_a", "live", "con_0")).toBeUndefined();
    leases.hold("ptr_a", "live", "con_1", "approved", 0, 1000);
    leases.forget("ptr_a", "live", "con_1");
    expect(leases.get("ptr_a", "live", "con_1")).toBeUndefined();
    for (const id of ["con_2", "con_3", "con_4"]) leases.hold("ptr_a", "live", id, "pending", 0, 1000);
    expect(["con_2", "con_3", "con_4"].filter((id) => leases.get("ptr_a", "live", id) !== undefined)).toEqual(["con_3", "con_4"]);
  });

  describe("through the route", () => {
    let edge: Edge | undefined;
    afterEach(async () => edge?.stop());

    it("answers a leased status again without asking, byte for byte, and asks again after the partner's DELETE", async () => {
      const asked: boolean[] = [];
      edge = await startEdge({
        connections: {
          getConnection: (req) => {
            asked.push(req.lease);
            return { connection: { id: req.id, status: connectionv1.ExternalStatus.APPROVED }, leaseMs: 60_000 };
          },
          revokeConnection: (req) => ({ connection: { id: req.id, status: connectionv1.ExternalStatus.REVOKED } }),
        },
      });
      const headers = { authorization: `Bearer ${await edge.token("ptr_a")}` };
      const first = await edge.send("GET", "/v1/connections/con_1", { headers });
      const second = await edge.send("GET", "/v1/connections/con_1", { headers });
      expect(first.status).toBe(200);
      expect(second.text).toBe(first.text);
      expect(second.text).toBe('{"id":"con_1","status":"approved"}');
      expect(asked).toEqual([true]);
      // Another partner, or the other mode, holds nothing of it.
      await edge.send("GET", "/v1/connections/con_1", { headers: { authorization: `Bearer ${await edge.token("ptr_b")}` } });
      await edge.send("GET", "/v1/connections/con_1", { headers: { authorization: `Bearer ${await edge.token("ptr_a", undefined, "test")}` } });
      expect(asked).toHaveLength(3);
      expect((await edge.send("DELETE", "/v1/connections/con_1", { headers })).status).toBe(200);
      await edge.send("GET", "/v1/connections/con_1", { headers });
      expect(asked).toHaveLength(4);
    });
  });
});
