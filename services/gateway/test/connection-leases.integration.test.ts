import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { clientsFor } from "@pi/common/clients";
import { createLogger } from "@pi/common/logger";
import { databaseName } from "@pi/common/mongo";
import { newId } from "@pi/common/ids";
import type { RunningService } from "@pi/common/run-service";
import type { Settings } from "@pi/common/settings";
import { startConnectionService } from "../../connection/src/service.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";
import { startEdge, type Edge } from "./edge-harness.js";

// Read leases end to end on their parts: two gateways, each in front of its own replica of the
// real connection service on the real database. Gateway A answers a connection's status from
// memory under a lease; the caregiver's change, made through the other replica, is stored only
// after that lease ended, so no gateway can answer the old status once another answered the new
// one, and a partner's own DELETE, through either gateway, shows at once through both.

const LEASE_MS = 1500;
let settings: Settings;
const replicas: RunningService[] = [];
const gateways: Edge[] = [];
/** The lease asked for and the lease granted, per request each gateway forwarded. */
const forwarded: { gateway: number; lease: boolean; leaseMs: number }[] = [];
let caregiver: ReturnType<ReturnType<typeof clientsFor>["connectionAdmin"]>;
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings({ CONNECTION_READ_LEASE_MS: String(LEASE_MS) });
  for (let i = 0; i < 2; i++) replicas.push(await startConnectionService(settings, createLogger(`connection-${i}`, settings.LOG_LEVEL)));
  caregiver = clientsFor({ ...settings, ...addressOf("connection", replicas[1]!) }).connectionAdmin();
  for (const [i, replica] of replicas.entries()) {
    const client = clientsFor({ ...as(settings, "gateway"), CONNECTION_SERVICE_URL: `http://127.0.0.1:${replica.port}` }).connection();
    gateways.push(
      await startEdge({
        connections: {
          getConnection: async (req) => {
            const res = await client.getConnection(req);
            forwarded.push({ gateway: i, lease: req.lease, leaseMs: res.leaseMs });
            return res;
          },
          requestConnection: (req) => client.requestConnection(req),
          revokeConnection: (req) => client.revokeConnection(req),
        },
      }),
    );
  }
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await Promise.all(gateways.map((g) => g.stop()));
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "connection")).dropDatabase();
  await mongo?.close();
});

/** An approved live connection of a new partner, and that partner's token at each gateway. */
async function approvedConnection() {
  const partnerId = newId("ptr");
  const tokens = await Promise.all(gateways.map((g) => g.token(partnerId)));
  const { address } = await caregiver.createElder({});
  const created = await gateways[0]!.send("POST", "/v1/connections", { headers: { authorization: `Bearer ${tokens[0]}`, "content-type": "application/json" }, body: JSON.stringify({ elder: address }) });
  const id = created.json.id as string;
  await caregiver.approveConnection({ id });
  const poll = async (g: number) => (await gateways[g]!.send("GET", `/v1/connections/${id}`, { headers: { authorization: `Bearer ${tokens[g]}` } })).json.status as string;
  const remove = async (g: number) => (await gateways[g]!.send("DELETE", `/v1/connections/${id}`, { headers: { authorization: `Bearer ${tokens[g]}` } })).json.status as string;
  return { id, poll, remove };
}

describe("connection read leases: polls answered from a gateway's memory", () => {
  it("monotonic reads across gateways: once one gateway answered revoked, the other never answers approved again (the caregiver's sever waits for its lease)", async () => {
    const c = await approvedConnection();
    const before = forwarded.length;
    expect(await c.poll(0)).toBe("approved");
    expect(await c.poll(0)).toBe("approved");
    // The second poll was answered from gateway A's memory, under the lease the first one got.
    expect(forwarded.slice(before)).toEqual([{ gateway: 0, lease: true, leaseMs: LEASE_MS }]);
    const severStarted = performance.now();
    await caregiver.severConnection({ id: c.id });
    // Stored only once A's lease ended (a lower bound: a busy machine only makes it longer).
    expect(performance.now() - severStarted).toBeGreaterThan(LEASE_MS / 2);
    expect(await c.poll(1)).toBe("revoked");
    expect(await c.poll(0)).toBe("revoked");
  });

  it("a partner's own DELETE shows at once, through the gateway that holds a lease and through the other", async () => {
    const c = await approvedConnection();
    expect(await c.poll(0)).toBe("approved");
    expect(await c.poll(1)).toBe("approved");
    expect(await c.remove(1)).toBe("revoked");
    expect(await c.poll(0)).toBe("revoked");
    expect(await c.poll(1)).toBe("revoked");
  });

  it("a change under way grants no lease: a poll meanwhile asks the service each time and reads the stored status", async () => {
    const c = await approvedConnection();
    expect(await c.poll(0)).toBe("approved");
    const sever = caregiver.severConnection({ id: c.id });
    // The sever fences new leases before it waits: wait for its fence, then poll through B.
    const connections = mongo.db(databaseName(settings.DATA_NAMESPACE, "connection")).collection("connections");
    for (const deadline = Date.now() + 10_000; !(await connections.findOne({ _id: c.id as never }))?.fencedUntil && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 20));
    const before = forwarded.length;
    expect(await c.poll(1)).toBe("approved");
    expect(await c.poll(1)).toBe("approved");
    expect(forwarded.slice(before)).toEqual([
      { gateway: 1, lease: true, leaseMs: 0 },
      { gateway: 1, lease: true, leaseMs: 0 },
    ]);
    await sever;
    expect(await c.poll(1)).toBe("revoked");
    expect(await c.poll(0)).toBe("revoked");
  });
});
