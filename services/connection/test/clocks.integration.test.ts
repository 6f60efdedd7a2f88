import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Writable } from "node:stream";
import { MongoClient } from "mongodb";
import { clientsFor } from "@pi/common/clients";
import { createLogger } from "@pi/common/logger";
import { databaseName } from "@pi/common/mongo";
import { newId } from "@pi/common/ids";
import type { RunningService } from "@pi/common/run-service";
import type { Settings } from "@pi/common/settings";
import { commonv1, connectionv1 } from "@pi/proto";
import { startConnectionService } from "../src/service.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";

// Replicas whose clocks disagree (docs/connections.md, "Clocks"): three replicas of the connection
// service on one database, one on the true clock, one 4 s behind it, one 4 s ahead (an injected
// clock, ConnectionServiceSeams.clock). Read leases are kept on the database's clock, which each
// replica measures: the skewed ones grant no lease and say so, and a change made through either of
// them still waits for every lease the true one granted, and never gives up.

const SKEW_MS = 4_000;
const LEASE_MS = 1_000;
let settings: Settings;
const replicas: RunningService[] = [];
/** Caregiver (admin) and partner (gateway) clients of each replica: 0 true, 1 behind, 2 ahead. */
const caregiver: ReturnType<ReturnType<typeof clientsFor>["connectionAdmin"]>[] = [];
const partner: ReturnType<ReturnType<typeof clientsFor>["connection"]>[] = [];
/** Each replica's log lines, parsed: every line is one JSON object. */
const logs: Record<string, unknown>[][] = [[], [], []];
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings({ CONNECTION_READ_LEASE_MS: String(LEASE_MS) });
  for (const [i, skew] of [0, -SKEW_MS, SKEW_MS].entries()) {
    const sink = new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split("\n").filter(Boolean))
          logs[i]!.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    const replica = await startConnectionService(settings, createLogger(`connection-${i}`, "info", sink), {
      clock: () => new Date(Date.now() + skew),
    });
    replicas.push(replica);
    caregiver.push(clientsFor({ ...settings, ...addressOf("connection", replica) }).connectionAdmin());
    partner.push(
      clientsFor({
        ...as(settings, "gateway"),
        CONNECTION_SERVICE_URL: `http://127.0.0.1:${replica.port}`,
      }).connection(),
    );
  }
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "connection")).dropDatabase();
  await mongo?.close();
});

/** An approved live connection of a new partner (through the true replica). */
async function approvedConnection() {
  const partnerId = newId("ptr");
  const { address } = await caregiver[0]!.createElder({});
  const { connection } = await partner[0]!.requestConnection({
    partnerId,
    mode: commonv1.Mode.LIVE,
    elderAddress: address,
  });
  const id = connection!.id;
  await caregiver[0]!.approveConnection({ id });
  return {
    id,
    read: (r: number) => partner[r]!.getConnection({ partnerId, id, mode: commonv1.Mode.LIVE, lease: true }),
  };
}

describe("replicas' clocks are checked, not assumed", () => {
  it("a replica whose clock is 4 s off the database's grants no read lease, and logs it as one structured line", async () => {
    const c = await approvedConnection();
    expect((await c.read(0)).leaseMs).toBe(LEASE_MS);
    for (const r of [1, 2]) {
      const read = await c.read(r);
      expect(read.connection!.status).toBe(connectionv1.ExternalStatus.APPROVED);
      expect(read.leaseMs).toBe(0);
      const line = logs[r]!.find((l) => String(l.msg).includes("read leases suspended"));
      expect(line).toMatchObject({ level: expect.anything(), limitMs: 125, offsetMs: expect.any(Number) });
      expect(Math.abs(Math.abs(line!.offsetMs as number) - SKEW_MS)).toBeLessThan(500);
    }
    expect(logs[0]!.filter((l) => String(l.msg).includes("read leases suspended"))).toEqual([]);
  });

  it("a sever through a replica 4 s behind, while the connection is polled steadily through the true one, is stored once every lease granted before it ended, and never gives up", async () => {
    const c = await approvedConnection();
    const grants: { askedAt: number; leaseMs: number }[] = [];
    let stop = false;
    const polling = (async () => {
      while (!stop) {
        const askedAt = Date.now();
        const read = await c.read(0);
        if (read.connection!.status !== connectionv1.ExternalStatus.APPROVED) break;
        grants.push({ askedAt, leaseMs: read.leaseMs });
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    // The sentinel: a lease granted to the poller.
    while (!grants.some((g) => g.leaseMs > 0)) await new Promise((r) => setTimeout(r, 20));
    try {
      const severed = await caregiver[1]!.severConnection({ id: c.id }, { timeoutMs: 20_000 });
      const storedBy = Date.now();
      expect(severed.result!.internalStatus).toBe(connectionv1.InternalStatus.REVOKED);
      // Every lease the poller was granted had ended by the time the change was stored.
      for (const g of grants.filter((x) => x.leaseMs > 0)) expect(g.askedAt + g.leaseMs).toBeLessThanOrEqual(storedBy);
    } finally {
      stop = true;
      await polling;
    }
    expect((await c.read(0)).connection!.status).toBe(connectionv1.ExternalStatus.REVOKED);
  }, 30_000);

  it("a sever through a replica 4 s ahead waits for the lease the true one granted just before (reads never go back)", async () => {
    const c = await approvedConnection();
    const askedAt = Date.now();
    const read = await c.read(0);
    expect(read.leaseMs).toBe(LEASE_MS);
    const severed = await caregiver[2]!.severConnection({ id: c.id });
    expect(severed.result!.internalStatus).toBe(connectionv1.InternalStatus.REVOKED);
    // A gateway answers approved from memory until askedAt + leaseMs: the revocation is stored no earlier.
    expect(Date.now()).toBeGreaterThanOrEqual(askedAt + read.leaseMs);
  });
});
