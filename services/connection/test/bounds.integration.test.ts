import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { ErrorReason, reasonOf } from "@pi/common/rpc/errors";
import { newId } from "@pi/common/rules/ids";
import { parseSettings, type Settings } from "@pi/common/runtime/settings";
import { sandboxElderAddress } from "@pi/common/rules/elder-address";
import { Connections } from "../src/connections.js";
import { secondsUntilNextDay } from "../src/bounds.js";
import { openingsKey, repairCounters, SLOT_GRACE_MS, slotsKey, takeSlot } from "../src/slots.js";
import { openConnectionStore, type ConnectionStore } from "../src/store.js";
import { movableClock, unresolvableAddress } from "./test-helpers.js";

// The per-partner bounds of the connection store (docs/connections.md, "Bounds") on the real
// MongoDB-wire server, with two Connections on one database standing for two replicas and a clock
// the tests move.

const limit = 5;
const interval = 3600;
let settings: Settings;
let mongo: Mongo;
let store: ConnectionStore;
const clock = movableClock();
const tick = clock.tick;
const replica = () => new Connections(store, settings, () => undefined, clock.now);

const unresolvable = () => unresolvableAddress(settings.ADDRESS_DOMAIN);
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
  await store.elders.insertOne({
    _id: sandboxElderAddress(settings.ADDRESS_DOMAIN),
    elderId: "eld_sandbox",
    createdAt: new Date(),
  });
});

afterAll(async () => {
  await mongo?.db.dropDatabase();
  await mongo?.close();
});

describe("pending connections per partner and mode: bounded atomically across replicas", () => {
  it("of 40 concurrent requests on two replicas, resolvable and not, exactly the bound succeed; the rest get one RATE_LIMITED", async () => {
    const partnerId = newId("ptr");
    const [a, b] = [replica(), replica()];
    const addresses = await Promise.all(
      Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? elder() : Promise.resolve(unresolvable()))),
    );
    const results = await Promise.all(
      addresses.map((address, i) => refusal((i % 2 === 0 ? a : b).request(partnerId, "live", address))),
    );
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
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toMatchObject({
      reason: ErrorReason.RATE_LIMITED,
    });
    expect((await c.request(partnerId, "live", first.address))._id).toBe(first._id);

    // A decline still reads as pending: it keeps the slot. An approval frees it.
    await c.apply({ _id: first._id }, "decline");
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toMatchObject({
      reason: ErrorReason.RATE_LIMITED,
    });
    await c.apply({ _id: first._id }, "approve");
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toBeNull();
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toMatchObject({
      reason: ErrorReason.RATE_LIMITED,
    });

    // The expiry sweep frees every slot whose window ended.
    tick(settings.CONNECTION_PENDING_TTL_SECONDS);
    await c.expireDue();
    expect((await store.slots.findOne({ _id: slotsKey(partnerId, "live") }))?.count).toBe(0);
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toBeNull();
  });

  it("the repair gives back a slot a dead request left, and only once its grace has passed", async () => {
    const partnerId = newId("ptr");
    await replica().request(partnerId, "live", unresolvable());
    await takeSlot(store.slots, { _id: newId("con"), partnerId, mode: "live" }, limit, clock.now()); // its connection never written
    const key = slotsKey(partnerId, "live");
    expect((await store.slots.findOne({ _id: key }))?.count).toBe(2);
    await repairCounters(store, new Date(clock.now().getTime() + SLOT_GRACE_MS - 1000));
    expect((await store.slots.findOne({ _id: key }))?.count).toBe(2);
    await repairCounters(store, new Date(clock.now().getTime() + SLOT_GRACE_MS + 1000));
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
    const start = clock.now();
    const realAddress = await elder();
    const real = await asked(realAddress, true);
    clock.set(start);
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
    expect(await refusal(c.request(partnerId, "live", realAddress))).toEqual({
      reason: ErrorReason.RATE_LIMITED,
      retryAfterSeconds: interval,
    });
  });

  it("a test connection has its own, shorter interval", async () => {
    const partnerId = newId("ptr");
    const c = replica();
    const con = await c.request(partnerId, "test", unresolvable());
    await c.apply({ _id: con._id }, "delete");
    expect(await refusal(c.request(partnerId, "test", con.address))).toBeNull();
    await c.apply({ _id: con._id }, "delete");
    expect(await refusal(c.request(partnerId, "test", con.address))).toEqual({
      reason: ErrorReason.RATE_LIMITED,
      retryAfterSeconds: 60,
    });
    tick(60);
    expect(await refusal(c.request(partnerId, "test", con.address))).toBeNull();
  });
});

describe("per-day bound on connections opened: bounded atomically across replicas, the same answer for every address (guarantee 1)", () => {
  const daily = 3;
  // The pending bound is lifted so that only the daily one acts.
  const dailyReplica = () =>
    new Connections(
      store,
      { ...settings, CONNECTIONS_OPENED_PER_PARTNER_PER_DAY: daily, PENDING_CONNECTIONS_PER_PARTNER: 1000 },
      () => undefined,
      clock.now,
    );
  /** Opens `n` connections of a new partner and deletes each (a POST-DELETE loop): no slot stays held. */
  async function openAndDelete(c: Connections, partnerId: string, n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const con = await c.request(partnerId, "live", unresolvable());
      await c.apply({ _id: con._id }, "delete");
    }
  }

  it("two replicas racing for the last opening of the day: exactly one gets it, the other the RATE_LIMITED of a real and an unknown address alike", async () => {
    clock.set(new Date("2030-06-01T10:00:00Z"));
    const [a, b] = [dailyReplica(), dailyReplica()];
    for (let round = 0; round < 6; round++) {
      const partnerId = newId("ptr");
      await openAndDelete(a, partnerId, daily - 1);
      const [real, unknown] = [await elder(), unresolvable()];
      const results = await Promise.all([
        refusal(a.request(partnerId, "live", round % 2 ? real : unknown)),
        refusal(b.request(partnerId, "live", round % 2 ? unknown : real)),
      ]);
      expect(results.filter((r) => r === null)).toHaveLength(1);
      expect(results.find((r) => r !== null)).toEqual({
        reason: ErrorReason.RATE_LIMITED,
        retryAfterSeconds: 14 * 3600,
      });
      expect(await store.connections.countDocuments({ partnerId })).toBe(daily);
      expect((await store.openings.findOne({ _id: openingsKey(partnerId, "live", "2030-06-01") }))?.count).toBe(daily);
      // The refused request gave its pending slot back: only the winner's is held.
      expect((await store.slots.findOne({ _id: slotsKey(partnerId, "live") }))?.count).toBe(1);

      // Past the bound, every new address gets the same answer, whichever replica and whether or not it resolves; nothing is written.
      const audits = await store.connections.countDocuments({ partnerId, "audit.0": { $exists: true } });
      const more = await Promise.all(
        [a.request(partnerId, "live", await elder()), b.request(partnerId, "live", unresolvable())].map(refusal),
      );
      expect(more).toEqual([results.find((r) => r !== null), results.find((r) => r !== null)]);
      expect(await store.connections.countDocuments({ partnerId })).toBe(daily);
      expect(await store.connections.countDocuments({ partnerId, "audit.0": { $exists: true } })).toBe(audits);
    }
  });

  it("of 30 concurrent requests for new addresses on two replicas, exactly the bound open; the test mode and another partner count on their own", async () => {
    clock.set(new Date("2030-06-02T10:00:00Z"));
    const partnerId = newId("ptr");
    const [a, b] = [dailyReplica(), dailyReplica()];
    const addresses = await Promise.all(
      Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? elder() : Promise.resolve(unresolvable()))),
    );
    const results = await Promise.all(
      addresses.map((address, i) => refusal((i % 2 === 0 ? a : b).request(partnerId, "live", address))),
    );
    expect(results.filter((r) => r === null)).toHaveLength(daily);
    expect(new Set(results.filter((r) => r !== null).map((r) => JSON.stringify(r)))).toEqual(
      new Set([JSON.stringify({ reason: ErrorReason.RATE_LIMITED, retryAfterSeconds: 14 * 3600 })]),
    );
    expect(await refusal(a.request(partnerId, "test", unresolvable()))).toBeNull();
    expect(await refusal(b.request(newId("ptr"), "live", unresolvable()))).toBeNull();
  });

  it("a request for a connection that exists is no opening: answered at the bound, and a reopening is left to its own interval", async () => {
    clock.set(new Date("2030-06-03T10:00:00Z"));
    const partnerId = newId("ptr");
    const c = dailyReplica();
    const first = await c.request(partnerId, "live", await elder());
    await openAndDelete(c, partnerId, daily - 1);
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toMatchObject({
      reason: ErrorReason.RATE_LIMITED,
    });
    expect((await c.request(partnerId, "live", first.address))._id).toBe(first._id);
  });

  it("a reopening counts as an opening: past the day's bound a revoked connection stays revoked, with the same RATE_LIMITED for a real and an unknown address, and reopens the next day", async () => {
    clock.set(new Date("2030-06-06T10:00:00Z"));
    const partnerId = newId("ptr");
    const c = dailyReplica();
    const real = await c.request(partnerId, "live", await elder());
    const unknown = await c.request(partnerId, "live", unresolvable());
    for (const con of [real, unknown]) await c.apply({ _id: con._id }, "delete");
    // Reopening one of them takes the day's third opening: the other cannot reopen, nor a new address open.
    tick(interval);
    expect((await c.request(partnerId, "live", unknown.address)).status).toBe("pending");
    const refusals = [
      await refusal(c.request(partnerId, "live", real.address)),
      await refusal(c.request(partnerId, "live", unresolvable())),
    ];
    expect(refusals).toEqual([
      { reason: ErrorReason.RATE_LIMITED, retryAfterSeconds: secondsUntilNextDay(clock.now()) },
      { reason: ErrorReason.RATE_LIMITED, retryAfterSeconds: secondsUntilNextDay(clock.now()) },
    ]);
    expect((await store.connections.findOne({ _id: real._id }))?.status).toBe("revoked");
    // The refused reopening gave its pending slot back: only the reopened connection holds one.
    expect((await store.slots.findOne({ _id: slotsKey(partnerId, "live") }))?.count).toBe(1);
    expect((await store.openings.findOne({ _id: openingsKey(partnerId, "live", "2030-06-06") }))?.count).toBe(daily);

    clock.set(new Date("2030-06-07T00:00:00Z"));
    expect((await c.request(partnerId, "live", real.address)).status).toBe("pending");
    expect((await store.openings.findOne({ _id: openingsKey(partnerId, "live", "2030-06-07") }))?.count).toBe(1);
  });

  it("an injected clock crossing midnight UTC frees the count; Retry-After counts down to that midnight", async () => {
    clock.set(new Date("2030-06-04T23:59:58Z"));
    const partnerId = newId("ptr");
    const c = dailyReplica();
    await openAndDelete(c, partnerId, daily);
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toEqual({
      reason: ErrorReason.RATE_LIMITED,
      retryAfterSeconds: 2,
    });
    tick(1);
    expect(await refusal(c.request(partnerId, "live", await elder()))).toEqual({
      reason: ErrorReason.RATE_LIMITED,
      retryAfterSeconds: 1,
    });
    tick(1);
    expect(clock.now().toISOString()).toBe("2030-06-05T00:00:00.000Z");
    await openAndDelete(c, partnerId, daily);
    expect(await refusal(c.request(partnerId, "live", unresolvable()))).toEqual({
      reason: ErrorReason.RATE_LIMITED,
      retryAfterSeconds: secondsUntilNextDay(clock.now()),
    });
    expect(secondsUntilNextDay(clock.now())).toBe(86_400);
    expect(await store.connections.countDocuments({ partnerId })).toBe(2 * daily);
  });

  it("the repair round deletes the opening counters of days before yesterday and keeps yesterday's and today's", async () => {
    const partnerId = newId("ptr");
    const c = dailyReplica();
    const days = ["2030-07-01", "2030-07-02", "2030-07-03", "2030-07-04"];
    for (const day of days) {
      clock.set(new Date(`${day}T12:00:00Z`));
      await openAndDelete(c, partnerId, 1);
    }
    const kept = async () => (await store.openings.find({ partnerId }).toArray()).map((d) => d._id).sort();
    expect(await kept()).toEqual(days.map((d) => openingsKey(partnerId, "live", d)));
    await repairCounters(store, new Date("2030-07-03T23:59:59Z"));
    expect(await kept()).toEqual(days.slice(1).map((d) => openingsKey(partnerId, "live", d)));
    await repairCounters(store, new Date("2030-07-04T00:00:00Z"));
    expect(await kept()).toEqual(days.slice(2).map((d) => openingsKey(partnerId, "live", d)));
    await repairCounters(store, new Date("2030-07-05T23:59:59Z"));
    expect(await kept()).toEqual(days.slice(3).map((d) => openingsKey(partnerId, "live", d)));
    await repairCounters(store, new Date("2030-07-06T00:00:00Z"));
    expect(await kept()).toEqual([]);
  });
});
