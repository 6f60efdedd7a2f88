import { afterEach, describe, expect, it } from "@jest/globals";
import { connectionv1 } from "@pi/proto";
import { ConnectionLeases } from "../src/connection-leases.js";
import { startEdge, type Edge } from "./edge-harness.js";

describe("connection read leases in the gateway", () => {
  /** A read answering `status` with `leaseMs`, after the clock moved `takesMs`; counts its calls. */
  function reader(clock: { t: number }, status: string, leaseMs: number, takesMs = 0) {
    const calls: number[] = [];
    const read = async () => {
      calls.push(clock.t);
      clock.t += takesMs;
      return { status, leaseMs };
    };
    return { read, calls };
  }

  it("holds a status until its lease ends, counted from before the request", async () => {
    const clock = { t: 1000 };
    const leases = new ConnectionLeases(10, () => clock.t);
    const r = reader(clock, "approved", 1000, 200); // the answer comes 200 ms after the request
    expect(await leases.status("ptr_a", "live", "con_1", r.read)).toBe("approved");
    clock.t = 1499;
    expect(await leases.status("ptr_a", "live", "con_1", r.read)).toBe("approved");
    expect(r.calls).toEqual([1000]);
    // Another partner, or the other mode, holds nothing of it.
    await leases.status("ptr_b", "live", "con_1", r.read);
    await leases.status("ptr_a", "test", "con_1", r.read);
    expect(r.calls).toHaveLength(3);
    clock.t = 2000;
    const after = reader(clock, "revoked", 0);
    expect(await leases.status("ptr_a", "live", "con_1", after.read)).toBe("revoked");
    expect(after.calls).toEqual([2000]);
  });

  it("past half its lease, answers under it and renews it in the background, once", async () => {
    const clock = { t: 0 };
    const leases = new ConnectionLeases(10, () => clock.t);
    const first = reader(clock, "approved", 1000);
    await leases.status("ptr_a", "live", "con_1", first.read);
    clock.t = 600;
    const renewal = reader(clock, "approved", 1000);
    expect(await leases.status("ptr_a", "live", "con_1", renewal.read)).toBe("approved");
    expect(await leases.status("ptr_a", "live", "con_1", renewal.read)).toBe("approved");
    expect(renewal.calls).toEqual([600]);
    await new Promise((r) => setImmediate(r));
    clock.t = 1050; // past the first lease (1000), within the renewed one (600 + 1000), before its half
    const none = reader(clock, "revoked", 0);
    expect(await leases.status("ptr_a", "live", "con_1", none.read)).toBe("approved");
    expect(none.calls).toEqual([]);
  });

  it("holds nothing without a lease, forgets on the partner's own DELETE, and keeps at most its bound", async () => {
    const clock = { t: 0 };
    const leases = new ConnectionLeases(2, () => clock.t);
    const unleased = reader(clock, "approved", 0);
    await leases.status("ptr_a", "live", "con_0", unleased.read);
    await leases.status("ptr_a", "live", "con_0", unleased.read);
    expect(unleased.calls).toHaveLength(2);
    const leased = reader(clock, "approved", 1000);
    await leases.status("ptr_a", "live", "con_1", leased.read);
    leases.forget("ptr_a", "live", "con_1");
    await leases.status("ptr_a", "live", "con_1", leased.read);
    expect(leased.calls).toHaveLength(2);
    for (const id of ["con_2", "con_3", "con_4"]) await leases.status("ptr_a", "live", id, leased.read);
    const before = leased.calls.length;
    for (const id of ["con_3", "con_4", "con_2"]) await leases.status("ptr_a", "live", id, leased.read);
    expect(leased.calls.length - before).toBe(1); // con_2 was dropped for the bound; con_3 and con_4 held
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
      await edge.send("GET", "/v1/connections/con_1", {
        headers: { authorization: `Bearer ${await edge.token("ptr_b")}` },
      });
      await edge.send("GET", "/v1/connections/con_1", {
        headers: { authorization: `Bearer ${await edge.token("ptr_a", undefined, "test")}` },
      });
      expect(asked).toHaveLength(3);
      expect((await edge.send("DELETE", "/v1/connections/con_1", { headers })).status).toBe(200);
      await edge.send("GET", "/v1/connections/con_1", { headers });
      expect(asked).toHaveLength(4);
    });
  });
});
