import type { Collection, Db, MongoClient } from "mongodb";
import { MongoDBStorage, Umzug } from "umzug";
import { endLease, keepAlive, takeLease, type LeaseFields } from "./background/lease.js";
import type { Logger } from "./logger.js";
import { insertIfNew } from "./persistence.js";
import { compareReleases, isRelease, RELEASE } from "./release.js";

// Versions of stored data, and the migrations between them, in one place (docs/upgrades.md). Every
// service that owns a database declares a StoreSchema: the version of each collection it owns, its
// migrations in order, and the oldest release that reads what it writes. At start, before it opens
// its store, `prepareStore`:
//
// 1. reads the store's mark (`store_version`, _id "store") and refuses to start, with one log line
//    and nothing written, when the mark says the store needs a newer release than this one (the
//    guard: a rollback past what the data allows);
// 2. runs the migrations not run yet (umzug, recorded in `store_migrations`), under a lease in the
//    same database (`store_version`, _id "migrating"), so that of any number of replicas starting
//    at once one runs them and the others wait for it; a holder that dies leaves the lease to run
//    out and the next replica goes on. Each migration is idempotent (it may be run again after a
//    crash, or by a replica that took over a lease run out) and resumable (it does in each step what
//    is left);
// 3. records the collections' versions, and raises the mark's oldest reader to the schema's
//    `readableFrom` only when that is newer: a release that writes only what the previous one reads
//    leaves it alone, so the previous release can still be rolled back to.
//
// A migration that fails is logged (one line), leaves nothing recorded for it, and fails the start:
// the process exits, is not ready, and the previous release's replicas keep serving the data as it
// was; the next start runs it again. Nothing here uses a transaction or a change stream.

/** What a migration gets: its service's database, the client (for a database beside it), a logger. */
export interface MigrationContext {
  db: Db;
  client: MongoClient;
  /** DATA_NAMESPACE: the prefix of the databases (databaseName). */
  namespace: string;
  logger: Logger;
}

export interface StoreMigration {
  /** Migrations run in the order of their names: "0001-...", "0002-...". Never renamed once released. */
  name: string;
  /** What it changes, one line (logged as it runs; docs/upgrades.md lists them). */
  about: string;
  /** Idempotent and resumable: run again after any partial run, it does what is left. */
  up(ctx: MigrationContext): Promise<void>;
}

export interface StoreSchema {
  /** The service whose database it is. */
  service: string;
  /** The version of every collection the service owns: bumped by the migration that changes its shape. */
  collections: Readonly<Record<string, number>>;
  migrations: readonly StoreMigration[];
  /**
   * The oldest release that reads everything this release writes. Equal to the previous release
   * while changes are only expansions (docs/upgrades.md); raised by the release that contracts.
   */
  readableFrom: string;
}

/** The store's mark: the oldest release that can read it, and the collections' versions. */
export interface StoreMark {
  _id: "store";
  /** The oldest release that reads this store: an older one refuses to start on it. */
  minReader: string;
  collections: Record<string, number>;
  /** The release that last ran its migrations here, and when. */
  migratedBy: string;
  migratedAt: Date;
}

interface MigratingLease {
  _id: "migrating";
  until: Date | null;
  holder: string | null;
}

export const STORE_VERSION_COLLECTION = "store_version";
export const STORE_MIGRATIONS_COLLECTION = "store_migrations";
const MIGRATING: LeaseFields = { until: "until", holder: "holder" };

/** Thrown after its one log line: the start is refused and the process exits without another. */
export class StoreRefusal extends Error {
  constructor(
    message: string,
    readonly reason: "needs_newer_release" | "migration_failed",
  ) {
    super(message);
  }
}

export interface PrepareOptions {
  client: MongoClient;
  namespace: string;
  logger: Logger;
  /** This code's release (RELEASE); tests pretend to be another. */
  release?: string;
  /** How long the migrating lease lasts without renewal (renewed every third of it). */
  leaseMs?: number;
  /** How often a replica waiting for another's migrations looks again. */
  pollMs?: number;
}

export interface Prepared {
  /** The migrations this replica ran (none when they had run, or another replica ran them). */
  ran: string[];
  mark: StoreMark;
}

function umzugOf(db: Db, schema: StoreSchema, ctx: MigrationContext) {
  const log = (level: "info" | "warn" | "error" | "debug") => (record: Record<string, unknown>) =>
    ctx.logger[level]({ store: db.databaseName, ...record }, `store migration ${String(record.event ?? "")}`.trim());
  return new Umzug({
    migrations: [...schema.migrations]
      .sort((a, b) => a.name.localeCompare(b.name))
      .map((m) => ({ name: m.name, up: () => m.up(ctx) })),
    storage: new MongoDBStorage({ collection: db.collection(STORE_MIGRATIONS_COLLECTION) as never }),
    logger: { info: log("info"), warn: log("warn"), error: log("error"), debug: log("debug") },
  });
}

/** The mark of `db`, or null for a store no release with a guard has written (empty, or from before). */
export function readMark(db: Db): Promise<StoreMark | null> {
  return (db.collection(STORE_VERSION_COLLECTION) as unknown as Collection<StoreMark>).findOne({ _id: "store" });
}

/**
 * The guard, then the migrations, then the mark (above). Throws StoreRefusal, already logged, when
 * the store needs a newer release or a migration failed.
 */
export async function prepareStore(db: Db, schema: StoreSchema, opts: PrepareOptions): Promise<Prepared> {
  const release = opts.release ?? RELEASE;
  const logger = opts.logger;
  const leaseMs = opts.leaseMs ?? 30_000;
  const pollMs = opts.pollMs ?? 250;
  const store = db.databaseName;

  const before = await readMark(db);
  if (before && (!isRelease(before.minReader) || compareReleases(before.minReader, release) > 0)) {
    logger.fatal(
      { store, release, minReader: before.minReader, migratedBy: before.migratedBy },
      `store ${store} needs release ${before.minReader} or newer; this is ${release}: refusing to start (nothing was changed)`,
    );
    throw new StoreRefusal(`store ${store} needs release ${before.minReader} or newer`, "needs_newer_release");
  }

  const ctx: MigrationContext = { db, client: opts.client, namespace: opts.namespace, logger };
  const umzug = umzugOf(db, schema, ctx);
  const ran: string[] = [];
  const leases = db.collection(STORE_VERSION_COLLECTION) as unknown as Collection<MigratingLease>;
  for (;;) {
    if ((await umzug.pending()).length === 0) break;
    await insertIfNew(leases, { _id: "migrating", until: null, holder: null });
    const lease = await takeLease(leases, { _id: "migrating" }, MIGRATING, { ms: leaseMs });
    if (!lease) {
      // Another replica migrates: wait for it to finish, or for its lease to run out.
      await new Promise((resolve) => setTimeout(resolve, pollMs));
      continue;
    }
    const renewals = keepAlive(
      `the migrations of ${store}`,
      Math.max(50, Math.floor(leaseMs / 3)),
      () => renewLeaseOf(leases, lease.holder, leaseMs),
      logger,
    );
    try {
      const done = await umzug.up();
      ran.push(...done.map((m) => m.name));
    } catch (err) {
      const cause = (err as { cause?: unknown }).cause ?? err;
      const migration = (err as { migration?: { name?: string } }).migration?.name;
      logger.error(
        { store, release, migration, err: { message: (cause as Error).message } },
        `store migration ${migration ?? "(unknown)"} of ${store} failed: not starting; the data is as the previous release left it, and the next start runs it again`,
      );
      throw new StoreRefusal(
        `store migration ${migration ?? ""} failed: ${(cause as Error).message}`,
        "migration_failed",
      );
    } finally {
      await renewals.stop();
      await endLease(leases, "migrating", MIGRATING, lease.holder).catch(() => undefined);
    }
  }

  const mark = await recordMark(db, schema, release, before);
  if (ran.length > 0)
    logger.info(
      { store, release, migrations: ran, minReader: mark.minReader, collections: mark.collections },
      "store migrated",
    );
  return { ran, mark };
}

function renewLeaseOf(leases: Collection<MigratingLease>, holder: string, ms: number): Promise<boolean> {
  return leases
    .updateOne({ _id: "migrating", holder }, { $set: { until: new Date(Date.now() + ms) } })
    .then((r) => r.matchedCount === 1);
}

/**
 * Creates the mark, or brings the collections' versions up and the oldest reader up to
 * `readableFrom` when it is newer (never down: a rollback to an older release's code does not
 * make the data readable by older releases again). Conditional on what was read, so replicas
 * starting at once converge.
 */
async function recordMark(db: Db, schema: StoreSchema, release: string, read: StoreMark | null): Promise<StoreMark> {
  const marks = db.collection(STORE_VERSION_COLLECTION) as unknown as Collection<StoreMark>;
  for (let current = read; ; current = await readMark(db)) {
    if (!current) {
      const fresh: StoreMark = {
        _id: "store",
        minReader: schema.readableFrom,
        collections: { ...schema.collections },
        migratedBy: release,
        migratedAt: new Date(),
      };
      if (await insertIfNew(marks, fresh)) return fresh;
      continue;
    }
    const collections = { ...current.collections };
    for (const [name, version] of Object.entries(schema.collections))
      collections[name] = Math.max(collections[name] ?? 0, version);
    const minReader =
      compareReleases(schema.readableFrom, current.minReader) > 0 ? schema.readableFrom : current.minReader;
    const unchanged =
      minReader === current.minReader &&
      Object.entries(collections).every(([name, v]) => current!.collections[name] === v);
    if (unchanged) return current;
    const next: StoreMark = { ...current, minReader, collections, migratedBy: release, migratedAt: new Date() };
    const res = await marks.replaceOne(
      { _id: "store", minReader: current.minReader, migratedAt: current.migratedAt },
      next,
    );
    if (res.matchedCount === 1) return next;
  }
}
