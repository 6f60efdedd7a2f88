import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectMongo, databaseName, ErrorReason, newId, parseSettings, reasonOf, sandboxElderAddress, type Mongo, type Settings } from "@pi/common";
import { Connections } from "../src/connections.js";
import { repairSlots, SLOT_GRACE_MS, slotsKey, takeSlot } from "../src/slots.js";
import { openConnectionStore, type ConnectionStore } from "../src/store.js";

// The per-partner bounds of the connection store (docs/connections.md, "Bounds") on the real
// MongoDB-wire server, with two Connections on one database standing for two replicas and a clock
// the tests move.

const limit = 5;
const interval = 3600;
let settings: Settings;
let mongo: Mongo;
let store: ConnectionStore;
let clock = new Date("2030-01-01T00:00:00Z");
const tick = (seconds: number) => {
  clock = new Date(clock.getTime() + seconds * 1000);
};
const replica = () => new Connections(store, settings, () => undefined, () => clock);

const word = () =>
  Array.from(randomBytes(6))
    .map((b) => String.fromCharCode(97 + (b % 26)))
    .join("");
const unresolvable = () => `${word()}.${word()}.${word()}@${settings.ADDRESS_DOMAIN}`;
async function elder(): Promise<string> {
  const a = unresolvable();
  await store.elders.insertOne({ _id: a, elderId: newId("eld"), createdAt: new Date() });
  return a;
}

/** The error a request failed with, as the gateway reads it; null when it succeeded. */
async function refusal(p: Promise<unknown>) {
  try {
    await p;
    return null;
  } catch (err) {
    const r = reasonOf(err);
    if (!r) throw err;
    return r;
  }
}

beforeAll(async () => {
  settings = parseSettings({
    MONGODB_URI: process.env.TEST_MONGODB_URI,
    DATA_NAMESPACE: `t${randomBytes(5).toString("hex")}`,
    PENDING_CONNECTIONS_PER_PARTNER: String(limit),
    TEST_PENDING_CONNECTIONS_PER_PARTNER: String(limit),
    CONNECTION_REOPEN_INTERVAL_SECONDS: String(interval),
    TEST_CONNECTION_REOPEN_INTERVAL_SECONDS: "60",
  });
  mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, "connection"));
  store = await openConnectionStore(mongo.db);
  await store.elders.insertOne({ _id: sandboxElderAddress(settings.ADDRESS_DOMAIN), elderId: "eld_sandbox", createdAt: new Date() });
});

afterAll(async () => {
  await mongo?.db.dropDatabase();
  await mongo?.close();
});

describe("pending connections per partner and mode: bounded atomically across replicas", () => {
  it("of 40 concurrent requests on two replicas, resolvable and not, exactly the bound succeed; the rest get one RATE_LIMITED", async () => {
    const partnerId = newId("ptr");
    const [a, b] = [replica(), replica()];
    const addresses = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? elder() : Promise.resolve(unresolvable()))));
    const results = await Promise.all(addresses.map((address, i) => refusal((i % 2 === 0 ? a : b).request(partnerId, "live", address))));
    expect(results.filter((r) => r === null)).toHaveLength(limit);
    const refused = results.filter((r) => r !== null);
    expect(refused).toHaveLength(40 - limit);
    for (const r of refused) expect(r).toEqual({ reason: ErrorReason.RATE_LIMITED, retryAfterSeconds: 60 });
    expect(await store.connections.countDocuments({ partnerId })).toBe(limit);
    expect((await store.slots.findOne({ _id: slotsKey(partnerId, "live") }))?.count).toBe(limit);

    // The other mode and another partner have bounds of their own.
    expect(await refusal(a.request(partnerId, "test", unresolvable()))).toBeNull();
    expect(await refusal(a.request(newId("ptr"), "live", unresolvable()))).toBeNull();
  });

  it("a repeated request for a connection already pending is answered at the bound; a slot frees when a connection stops being pending", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const first = await c.request(partnerId, "live", await elder());
    for (let i = 1; i < limit; i++) await c.request(partnerId, "live", unresolvable());
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toMatchObject({ reason: ErrorReason.RATE_LIMITED });
    expect((await c.request(partnerId, "live", first.address))._id).toBe(first._id);

    // A decline still reads as pending: it keeps the slot. An approval frees it.
    await c.apply({ _id: first._id }, "decline");
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toMatchObject({ reason: ErrorReason.RATE_LIMITED });
    await c.apply({ _id: first._id }, "approve");
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toBeNull();
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toMatchObject({ reason: ErrorReason.RATE_LIMITED });

    // The expiry sweep frees every slot whose window ended.
    tick(settings.CONNECTION_PENDING_TTL_SECONDS);
    await c.expireDue();
    expect((await store.slots.findOne({ _id: slotsKey(partnerId, "live") }))?.count).toBe(0);
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toBeNull();
  });

  it("the repair gives back a slot a dead request left, and only once its grace has passed", async () => {
    const partnerId = newId("ptr");
    await replica().request(partnerId, "live", unresolvable());
    await takeSlot(store.slots, partnerId, "live", newId("con"), limit, clock); // its connection never written
    const key = slotsKey(partnerId, "live");
    expect((await store.slots.findOne({ _id: key }))?.count).toBe(2);
    await repairSlots(store, new Date(clock.getTime() + SLOT_GRACE_MS - 1000));
    expect((await store.slots.findOne({ _id: key }))?.count).toBe(2);
    await repairSlots(store, new Date(clock.getTime() + SLOT_GRACE_MS + 1000));
    expect((await store.slots.findOne({ _id: key }))?.count).toBe(1);
  });
});

describe("a declining caregiver is asked again at most once per reopen interval", () => {
  it("a DELETE then POST loop reopens the connection once per interval, with the same RATE_LIMITED for a resolvable and an unresolvable address", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const asked = async (address: string, resolvable: boolean) => {
      let reopenings = 0;
      const refusals: unknown[] = [];
      const con = await c.request(partnerId, "live", address);
      if (resolvable) await c.apply({ _id: con._id }, "decline");
      for (let i = 0; i < 20; i++) {
        await c.apply({ _id: con._id }, "delete");
        const r = await refusal(c.request(partnerId, "live", address));
        if (r === null) reopenings++;
        else refusals.push(r);
        if (resolvable && r === null) await c.apply({ _id: con._id }, "decline");
      }
      return { reopenings, refusals };
    };
    const start = clock;
    const realAddress = await elder();
    const real = await asked(realAddress, true);
    clock = start;
    const unknown = await asked(unresolvable(), false);
    expect(real.reopenings).toBe(1);
    expect(unknown.reopenings).toBe(1);
    expect(real.refusals).toHaveLength(19);
    expect(real.refusals[0]).toEqual({ reason: ErrorReason.RATE_LIMITED, retryAfterSeconds: interval });
    expect(unknown.refusals).toEqual(real.refusals);

    // A refused request changed nothing: still revoked. Once the interval has passed, one more reopening.
    tick(interval);
    expect(await refusal(c.request(partnerId, "live", realAddress))).toBeNull();
    const reopened = await c.request(partnerId, "live", realAddress);
    expect(reopened.status).toBe("pending");
    await c.apply({ _id: reopened._id }, "decline");
    await c.apply({ _id: reopened._id }, "delete");
    expect(await refusal(c.request(partnerId, "live", realAddress))).toEqual({ reason: ErrorReason.RATE_LIMITED, retryAfterSeconds: interval });
  });

  it("a test connection has its own, shorter interval", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const con = await c.request(partnerId, "test", unresolvable());
    await c.apply({ _id: con._id }, "delete");
    expect(await refusal(c.request(partnerId, "test", con.address))).toBeNull();
    await c.apply({ _id: con._id }, "delete");
    expect(await refusal(c.request(partnerId, "test", con.address))).toEqual({ reason: ErrorReason.RATE_LIMITED, retryAfterSeconds: 60 });
    tick(60);
    expect(await refusal(c.request(partnerId, "test", con.address))).toBeNull();
  });
});
