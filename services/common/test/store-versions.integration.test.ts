import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient, type Db } from "mongodb";
import { pino } from "pino";
import { createLogger } from "../src/runtime/logger.js";
import { databaseName } from "../src/store/mongo.js";
import { STORE_SCHEMAS } from "../src/store/migrations/index.js";
import {
  prepareStore,
  readMark,
  StoreRefusal,
  STORE_MIGRATIONS_COLLECTION,
  STORE_VERSION_COLLECTION,
  type StoreSchema,
} from "../src/store/store-versions.js";

// The store's versions, migrations and guard (docs/upgrades.md) on the real MongoDB-wire server,
// with "replicas" as separate MongoClients (separate pools, as separate processes have).

const logger = createLogger("store-versions-test", "silent");
let clients: MongoClient[];
const dropped: Db[] = [];

beforeAll(async () => {
  clients = await Promise.all([0, 1, 2].map(() => MongoClient.connect(process.env.TEST_MONGODB_URI!)));
});

afterAll(async () => {
  for (const db of dropped) await db.dropDatabase().catch(() => undefined);
  await Promise.all((clients ?? []).map((c) => c.close()));
});

function freshNamespace(): string {
  return `t${randomBytes(5).toString("hex")}`;
}

function dbOf(client: MongoClient, namespace: string, service = "svc"): Db {
  const db = client.db(databaseName(namespace, service));
  dropped.push(db);
  return db;
}

/** A logger whose lines are kept, as JSON objects. */
function capturingLogger() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split("\n").filter(Boolean))
        lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { lines, logger: pino({ level: "info" }, stream) };
}

const slowSchema = (runs: string[], ms: number): StoreSchema => ({
  collections: { things: 2 },
  readableFrom: "1.0.0",
  migrations: [
    {
      name: "0002-second",
      about: "second",
      async up({ db }) {
        runs.push("0002");
        await db.collection("things").updateMany({ shape: 1 }, { $set: { shape: 2 } });
      },
    },
    {
      name: "0001-first",
      about: "first",
      async up({ db }) {
        runs.push("0001");
        await new Promise((resolve) => setTimeout(resolve, ms));
        await db.collection("things").insertOne({ shape: 1 });
      },
    },
  ],
});

describe("migrations", () => {
  it("run in the order of their names, exactly once however many replicas start at once", async () => {
    const ns = freshNamespace();
    const runs: string[] = [];
    const schema = slowSchema(runs, 300);
    const results = await Promise.all(
      clients.map((client) => prepareStore(dbOf(client, ns), schema, { client, namespace: ns, logger, pollMs: 20 })),
    );
    expect(runs).toEqual(["0001", "0002"]);
    expect(results.flatMap((r) => r.ran).sort()).toEqual(["0001-first", "0002-second"]);
    const db = dbOf(clients[0]!, ns);
    expect(
      await db
        .collection("things")
        .find({}, { projection: { _id: 0 } })
        .toArray(),
    ).toEqual([{ shape: 2 }]);
    expect(
      (await db.collection(STORE_MIGRATIONS_COLLECTION).find().toArray()).map((m) => m.migrationName).sort(),
    ).toEqual(["0001-first", "0002-second"]);
    // Started again: nothing to run.
    const again = await prepareStore(db, schema, { client: clients[0]!, namespace: ns, logger });
    expect(again.ran).toEqual([]);
    expect(runs).toHaveLength(2);
  });

  it("a replica that died holding the migrating lease leaves it to run out, and the next one runs them", async () => {
    const ns = freshNamespace();
    const db = dbOf(clients[0]!, ns);
    await db
      .collection(STORE_VERSION_COLLECTION)
      .insertOne({ _id: "migrating" as never, until: new Date(Date.now() + 400), holder: "dead-replica" });
    const runs: string[] = [];
    const started = Date.now();
    const { ran } = await prepareStore(db, slowSchema(runs, 0), {
      client: clients[0]!,
      namespace: ns,
      logger,
      pollMs: 20,
    });
    expect(ran).toEqual(["0001-first", "0002-second"]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(350);
  });

  it("a failed migration: one log line naming it, nothing recorded for it, the mark not written; run again, it completes", async () => {
    const ns = freshNamespace();
    const db = dbOf(clients[0]!, ns);
    let fail = true;
    const schema: StoreSchema = {
      collections: { things: 3 },
      readableFrom: "1.0.0",
      migrations: [
        {
          name: "0001-ok",
          about: "ok",
          up: async ({ db }) =>
            void (await db
              .collection("things")
              .updateOne({ _id: "a" as never }, { $set: { ok: true } }, { upsert: true })),
        },
        {
          name: "0002-flaky",
          about: "fails the first time",
          async up() {
            if (fail) throw new Error("disk on fire");
          },
        },
      ],
    };
    const { lines, logger: captured } = capturingLogger();
    const refused = await prepareStore(db, schema, { client: clients[0]!, namespace: ns, logger: captured }).catch(
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(StoreRefusal);
    expect((refused as StoreRefusal).message).toBe("store migration 0002-flaky failed: disk on fire");
    const failures = lines.filter((l) => l.level === 50);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ migration: "0002-flaky", err: { message: "disk on fire" } });
    expect(String(failures[0]!.msg)).toContain("0002-flaky");
    expect((await db.collection(STORE_MIGRATIONS_COLLECTION).find().toArray()).map((m) => m.migrationName)).toEqual([
      "0001-ok",
    ]);
    expect(await readMark(db)).toBeNull();
    // The lease was given back: the next start does not wait for it to run out.
    expect(await db.collection(STORE_VERSION_COLLECTION).findOne({ _id: "migrating" as never })).toMatchObject({
      holder: null,
    });
    fail = false;
    const { ran, mark } = await prepareStore(db, schema, { client: clients[0]!, namespace: ns, logger });
    expect(ran).toEqual(["0002-flaky"]);
    expect(mark).toMatchObject({ minReader: "1.0.0", collections: { things: 3 } });
  });
});

describe("the guard", () => {
  it("a store whose oldest reader is newer than this release: refused with one log line, and nothing is written", async () => {
    const ns = freshNamespace();
    const db = dbOf(clients[0]!, ns);
    const runs: string[] = [];
    await prepareStore(db, slowSchema(runs, 0), { client: clients[0]!, namespace: ns, logger, release: "2.0.0" });
    await db
      .collection(STORE_VERSION_COLLECTION)
      .updateOne({ _id: "store" as never }, { $set: { minReader: "2.0.0" } });
    const snapshot = async () =>
      Promise.all(
        (await db.listCollections().toArray()).map(async (c) => [c.name, await db.collection(c.name).find().toArray()]),
      );
    const before = await snapshot();
    const { lines, logger: captured } = capturingLogger();
    const later: StoreSchema = {
      ...slowSchema(runs, 0),
      migrations: [
        ...slowSchema(runs, 0).migrations,
        { name: "0003-never", about: "", up: async () => void runs.push("0003") },
      ],
    };
    const refused = await prepareStore(db, later, {
      client: clients[0]!,
      namespace: ns,
      logger: captured,
      release: "1.9.9",
    }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(StoreRefusal);
    expect((refused as StoreRefusal).message).toMatch(/needs release 2\.0\.0 or newer$/);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 60, release: "1.9.9", minReader: "2.0.0" });
    expect(String(lines[0]!.msg)).toContain("needs release 2.0.0 or newer");
    expect(runs).not.toContain("0003");
    expect(await snapshot()).toEqual(before);
  });

  it("a release that writes only what the previous one reads leaves the oldest reader alone; one that contracts raises it; never lowered", async () => {
    const ns = freshNamespace();
    const db = dbOf(clients[0]!, ns);
    const base = (readableFrom: string, version: number): StoreSchema => ({
      collections: { things: version },
      readableFrom,
      migrations: [],
    });
    expect(
      (await prepareStore(db, base("1.0.0", 1), { client: clients[0]!, namespace: ns, logger, release: "1.1.0" })).mark
        .minReader,
    ).toBe("1.0.0");
    // An expanding release (1.2.0 reads 1.1.0's data, 1.1.0 reads 1.2.0's): the mark stays.
    expect(
      (await prepareStore(db, base("1.0.0", 2), { client: clients[0]!, namespace: ns, logger, release: "1.2.0" })).mark,
    ).toMatchObject({ minReader: "1.0.0", collections: { things: 2 } });
    // A rollback to 1.1.0 still starts.
    expect(
      (await prepareStore(db, base("1.0.0", 1), { client: clients[0]!, namespace: ns, logger, release: "1.1.0" })).mark,
    ).toMatchObject({ minReader: "1.0.0", collections: { things: 2 } });
    // The contracting release: from now on only 1.2.0 and later read it.
    expect(
      (await prepareStore(db, base("1.2.0", 3), { client: clients[0]!, namespace: ns, logger, release: "1.3.0" })).mark
        .minReader,
    ).toBe("1.2.0");
    await expect(
      prepareStore(db, base("1.0.0", 1), { client: clients[0]!, namespace: ns, logger, release: "1.1.0" }),
    ).rejects.toBeInstanceOf(StoreRefusal);
    expect(
      (await prepareStore(db, base("1.0.0", 2), { client: clients[0]!, namespace: ns, logger, release: "1.2.0" })).mark
        .minReader,
    ).toBe("1.2.0");
  });
});

describe("the migrations of 4e36e67's shapes", () => {
  it("file-intake 0001: old idempotency keys move under their file's mode; a claim with no file goes; a newer key under the same id wins; run again, nothing changes", async () => {
    const ns = freshNamespace();
    const db = dbOf(clients[0]!, ns, "file-intake");
    const at = new Date("2026-11-26T17:00:00Z");
    const expires = new Date(Date.now() + 86_400_000);
    await db.collection("files").insertMany([
      { _id: "fil_live" as never, mode: "live", partnerId: "ptr_a" },
      { _id: "fil_test" as never, mode: "test", partnerId: "ptr_a" },
      { _id: "fil_newer" as never, mode: "live", partnerId: "ptr_a" },
    ]);
    await db.collection("idempotency_keys").insertMany([
      {
        _id: "ptr_a:k1" as never,
        partnerId: "ptr_a",
        key: "k1",
        fingerprint: "f1",
        fileId: "fil_live",
        state: "committed",
        claimedAt: at,
        expiresAt: expires,
      },
      {
        _id: "ptr_a:k2" as never,
        partnerId: "ptr_a",
        key: "k2",
        fingerprint: "f2",
        fileId: "fil_test",
        state: "committed",
        claimedAt: at,
        expiresAt: expires,
      },
      {
        _id: "ptr_a:k3" as never,
        partnerId: "ptr_a",
        key: "k3",
        fingerprint: "f3",
        fileId: "fil_never_stored",
        state: "claimed",
        claimedAt: at,
        expiresAt: expires,
      },
      {
        _id: "ptr_a:k4" as never,
        partnerId: "ptr_a",
        key: "k4",
        fingerprint: "f4",
        fileId: "fil_live",
        state: "committed",
        claimedAt: at,
        expiresAt: expires,
      },
      // A key the newer release stored under the id the old k4 moves to.
      {
        _id: "ptr_a:live:k4" as never,
        partnerId: "ptr_a",
        mode: "live",
        key: "k4",
        fingerprint: "f4new",
        fileId: "fil_newer",
        state: "committed",
        claimedUntil: at,
        expiresAt: expires,
      },
    ]);
    const { ran } = await prepareStore(db, STORE_SCHEMAS["file-intake"], {
      client: clients[0]!,
      namespace: ns,
      logger,
    });
    expect(ran).toEqual(["0001-idempotency-keys-under-mode", "0002-drop-the-unused-gridfs-bucket"]);
    const keys = await db.collection("idempotency_keys").find().sort({ _id: 1 }).toArray();
    expect(keys).toEqual([
      {
        _id: "ptr_a:live:k1",
        partnerId: "ptr_a",
        mode: "live",
        key: "k1",
        fingerprint: "f1",
        fileId: "fil_live",
        state: "committed",
        claimedUntil: at,
        expiresAt: expires,
      },
      {
        _id: "ptr_a:live:k4",
        partnerId: "ptr_a",
        mode: "live",
        key: "k4",
        fingerprint: "f4new",
        fileId: "fil_newer",
        state: "committed",
        claimedUntil: at,
        expiresAt: expires,
      },
      {
        _id: "ptr_a:test:k2",
        partnerId: "ptr_a",
        mode: "test",
        key: "k2",
        fingerprint: "f2",
        fileId: "fil_test",
        state: "committed",
        claimedUntil: at,
        expiresAt: expires,
      },
    ]);
    // Resumable and idempotent: the migration itself run again (as after a crash before it was recorded).
    await STORE_SCHEMAS["file-intake"].migrations[0].up({ db, client: clients[0]!, namespace: ns, logger });
    expect(await db.collection("idempotency_keys").find().sort({ _id: 1 }).toArray()).toEqual(keys);
  });

  it("file-intake 0002: the empty GridFS bucket 4e36e67 created goes; one that holds anything is kept", async () => {
    const ns = freshNamespace();
    const db = dbOf(clients[0]!, ns, "file-intake");
    await db.collection("blobs.chunks").createIndex({ files_id: 1, n: 1 }, { unique: true });
    await db.collection("blobs.files").insertOne({ filename: "kept" });
    await prepareStore(db, STORE_SCHEMAS["file-intake"], { client: clients[0]!, namespace: ns, logger });
    const names = (await db.listCollections().toArray()).map((c) => c.name);
    expect(names).not.toContain("blobs.chunks");
    expect(names).toContain("blobs.files");
  });

  it("auth 0001: 4e36e67's audit records are copied, exactly as stored, into the trail's database; a record already there is left; the old collection goes", async () => {
    const ns = freshNamespace();
    const auth = dbOf(clients[0]!, ns, "auth");
    const trail = dbOf(clients[0]!, ns, "auth_audit");
    const record = (id: string, minute: number) => ({
      _id: id,
      occurredAt: new Date(`2026-11-26T17:${String(minute).padStart(2, "0")}:00Z`),
      service: "connection",
      actor: "operator",
      action: "connection.approve",
      targets: ["con_1", "ptr_1", "eld_1"],
      outcome: "ok",
      reason: "",
      sequence: minute,
      partition: 0,
      offset: minute,
      storedAt: new Date("2026-11-26T18:00:00Z"),
    });
    const old = Array.from({ length: 1_203 }, (_, i) => record(`evt_${String(i).padStart(5, "0")}`, i % 60));
    await auth.collection("audit_records").insertMany(old as never[]);
    // One the newer release stored already (the same id from the topic): left as it is.
    await trail
      .collection("audit_records")
      .insertOne({ ...record("evt_00007", 7), storedAt: new Date("2026-11-28T00:00:00Z") } as never);
    const { ran } = await prepareStore(auth, STORE_SCHEMAS.auth, { client: clients[0]!, namespace: ns, logger });
    expect(ran).toEqual(["0001-audit-records-into-the-trail-database"]);
    const copied = await trail.collection("audit_records").find().sort({ _id: 1 }).toArray();
    expect(copied).toHaveLength(1_203);
    expect(copied[0]).toEqual(old[0]);
    expect(copied[1_202]).toEqual(old[1_202]);
    expect(copied[7]!.storedAt).toEqual(new Date("2026-11-28T00:00:00Z"));
    expect((await auth.listCollections().toArray()).map((c) => c.name)).not.toContain("audit_records");
    // Run again (as after a crash before it was recorded): nothing to copy, nothing fails.
    await STORE_SCHEMAS.auth.migrations[0].up({ db: auth, client: clients[0]!, namespace: ns, logger });
    expect(await trail.collection("audit_records").countDocuments()).toBe(1_203);
  });
});
