import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { newId } from "@pi/common/rules/ids";
import { parseSettings, type Settings } from "@pi/common/runtime/settings";
import { dayKey } from "../src/bounds.js";
import { Connections } from "../src/connections.js";
import { openingsKey } from "../src/slots.js";
import { deleteEndedConnections, endedConnectionCutoff } from "../src/retention.js";
import { openConnectionStore, type ConnectionStore } from "../src/store.js";
import { movableClock, unresolvableAddress } from "./test-helpers.js";

// The retention of ended connections (docs/connections.md, "Retention") on the real MongoDB-wire
// server, with a clock the tests move: the sweep deletes exactly the revoked and expired
// connections unchanged for longer than the retention whose event and audit record were relayed.

const retention = 7200;
const interval = 3600;
let settings: Settings;
let mongo: Mongo;
let store: ConnectionStore;
const clock = movableClock();
const tick = clock.tick;
const replica = () => new Connections(store, settings, () => undefined, clock.now);
const cutoff = () =>
  endedConnectionCutoff(
    clock.now(),
    settings.ENDED_CONNECTION_RETENTION_SECONDS,
    settings.CONNECTION_REOPEN_INTERVAL_SECONDS,
  );

const unresolvable = () => unresolvableAddress(settings.ADDRESS_DOMAIN);
async function elder(): Promise<string> {
  const a = unresolvable();
  await store.elders.insertOne({ _id: a, elderId: newId("eld"), createdAt: new Date() });
  return a;
}

/** What the relays leave once they have sent a connection's events and audit records: empty arrays. */
async function relayed(id: string, what: { outbox?: boolean; audit?: boolean } = { outbox: true, audit: true }) {
  await store.connections.updateOne(
    { _id: id },
    { $set: { ...(what.outbox ? { outbox: [] } : {}), ...(what.audit ? { audit: [] } : {}) } },
  );
}

beforeAll(async () => {
  settings = parseSettings({
    MONGODB_URI: process.env.TEST_MONGODB_URI,
    DATA_NAMESPACE: `t${randomBytes(5).toString("hex")}`,
    CONNECTION_REOPEN_INTERVAL_SECONDS: String(interval),
    ENDED_CONNECTION_RETENTION_SECONDS: String(retention),
  });
  mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "connection"));
  store = await openConnectionStore(mongo.db);
});

afterAll(async () => {
  await mongo?.db.dropDatabase();
  await mongo?.close();
});

describe("ended connections are bounded by ENDED_CONNECTION_RETENTION_SECONDS", () => {
  it("the sweep deletes exactly the revoked and expired connections older than the retention with nothing left to publish; the rest stay", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const open = async (address?: string) => c.request(partnerId, "live", address ?? unresolvable());

    const oldRevoked = await open();
    await c.apply({ _id: oldRevoked._id }, "delete");
    const expiring = await open();
    // Approved then deleted: a connection.revoked event in its outbox.
    const withEvent = await open(await elder());
    await c.apply({ _id: withEvent._id }, "approve");
    await c.apply({ _id: withEvent._id }, "delete");
    const withAudit = await open();
    await c.apply({ _id: withAudit._id }, "delete");

    tick(settings.CONNECTION_PENDING_TTL_SECONDS);
    await c.expireDue();
    expect((await store.connections.findOne({ _id: expiring._id }))?.status).toBe("expired");
    // Stored pending and declined (no expiry sweep runs after them): never the retention's to delete.
    const pending = await open();
    const declined = await open(await elder());
    await c.apply({ _id: declined._id }, "decline");

    for (const con of [oldRevoked, expiring, pending, declined]) await relayed(con._id);
    await relayed(withEvent._id, { audit: true });
    await relayed(withAudit._id, { outbox: true });

    tick(retention + 1);
    const recentRevoked = await open();
    await c.apply({ _id: recentRevoked._id }, "delete");
    await relayed(recentRevoked._id);

    // Batches of one: the sweep goes on until none is left.
    expect(await deleteEndedConnections(store.connections, cutoff(), async () => true, 1)).toBe(2);
    const left = (await store.connections.find({ partnerId }, { projection: { _id: 1 } }).toArray())
      .map((d) => d._id)
      .sort();
    expect(left).toEqual([pending._id, declined._id, withEvent._id, withAudit._id, recentRevoked._id].sort());
    expect(await deleteEndedConnections(store.connections, cutoff())).toBe(0);

    // Once relayed, the other two go as well; the recent one waits for its retention.
    await relayed(withEvent._id);
    await relayed(withAudit._id);
    expect(await deleteEndedConnections(store.connections, cutoff())).toBe(2);
    tick(retention + 1);
    expect(await deleteEndedConnections(store.connections, cutoff())).toBe(1);
    expect(
      (await store.connections.find({ partnerId }, { projection: { _id: 1 } }).toArray()).map((d) => d._id).sort(),
    ).toEqual([pending._id, declined._id].sort());
  });

  it("a deleted connection's id reads as unknown, and a POST for its address opens a new connection that counts against the daily bound", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const address = await elder();
    const first = await c.request(partnerId, "live", address);
    await c.apply({ _id: first._id }, "delete");
    await relayed(first._id);
    tick(retention + 1);
    expect(await deleteEndedConnections(store.connections, cutoff())).toBeGreaterThanOrEqual(1);

    expect(await c.read({ _id: first._id, partnerId })).toBeNull();
    expect(await c.apply({ _id: first._id, partnerId }, "delete")).toBeNull();

    const day = openingsKey(partnerId, "live", dayKey(clock.now()));
    const openedBefore = (await store.openings.findOne({ _id: day }))?.count ?? 0;
    const again = await c.request(partnerId, "live", address);
    expect(again._id).not.toBe(first._id);
    expect(again.status).toBe("pending");
    expect((await store.openings.findOne({ _id: day }))?.count).toBe(openedBefore + 1);
    expect((await c.read({ _id: again._id, partnerId }))?._id).toBe(again._id);
  });

  it("a connection reopened after the sweep read its id stays: the deletion repeats the rule", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const con = await c.request(partnerId, "live", unresolvable());
    await c.apply({ _id: con._id }, "delete");
    await relayed(con._id);
    tick(retention + 1);
    // The sweep renews its lease between reading the ids and deleting them: the reopening lands there.
    const reopenMeanwhile = async () => {
      await c.request(partnerId, "live", con.address);
      await relayed(con._id);
      return true;
    };
    expect(await deleteEndedConnections(store.connections, cutoff(), reopenMeanwhile)).toBe(0);
    expect((await store.connections.findOne({ _id: con._id }))?.status).toBe("pending");
  });

  it("a sweep that lost its lease deletes nothing", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const con = await c.request(partnerId, "live", unresolvable());
    await c.apply({ _id: con._id }, "delete");
    await relayed(con._id);
    tick(retention + 1);
    expect(await deleteEndedConnections(store.connections, cutoff(), async () => false)).toBe(0);
    expect(await store.connections.countDocuments({ _id: con._id })).toBe(1);
  });
});
