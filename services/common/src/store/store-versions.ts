import type { Collection, Db, MongoClient } from "mongodb";
import { MongoDBStorage, Umzug } from "umzug";
import { type JobLeaseDoc, keepAlive, whileHolding } from "../background/lease.js";
import type { Logger } from "../runtime/logger.js";
import { insertIfNew } from "./persistence.js";
import { compareReleases, isRelease, RELEASE } from "../runtime/release.js";

// Versions of stored data and the migrations between them: docs/upgrades.md.

export interface MigrationContext {
  db: Db;
  client: MongoClient;
  namespace: string;
  logger: Logger;
}

export interface StoreMigration {
  /** Migrations run in the order of their names: "0001-...", "0002-...". Never renamed once released. */
  name: string;
  about: string;
  up(ctx: MigrationContext): Promise<void>;
}

export interface StoreSchema {
  /** The version of every collection the service owns: bumped by the migration that changes its shape. */
  collections: Readonly<Record<string, number>>;
  migrations: readonly StoreMigration[];
  /** The oldest release that reads everything this release writes: the previous one until a release contracts. */
  readableFrom: string;
}

export interface StoreMark {
  _id: "store";
  minReader: string;
  collections: Record<string, number>;
  migratedBy: string;
  migratedAt: Date;
}

export const STORE_VERSION_COLLECTION = "store_version";
export const STORE_MIGRATIONS_COLLECTION = "store_migrations";
/** How long the migrating lease lasts without renewal (renewed every third of it). */
const MIGRATING_LEASE_MS = 30_000;

/** Thrown after its one log line: the start is refused and the process exits without another. */
export class StoreRefusal extends Error {}

/** The mark of `db`, or null for a store no release with a guard has written (empty, or from before). */
export function readMark(db: Db): Promise<StoreMark | null> {
  return (db.collection(STORE_VERSION_COLLECTION) as unknown as Collection<StoreMark>).findOne({ _id: "store" });
}

/** The guard, then the migrations, then the mark; throws StoreRefusal, already logged. */
export async function prepareStore(
  db: Db,
  schema: StoreSchema,
  opts: {
    client: MongoClient;
    namespace: string;
    logger: Logger;
    release?: string;
    pollMs?: number;
  },
): Promise<{ ran: string[]; mark: StoreMark }> {
  const { logger, release = RELEASE, pollMs = 250 } = opts;
  const store = db.databaseName;

  const before = await readMark(db);
  if (before && (!isRelease(before.minReader) || compareReleases(before.minReader, release) > 0)) {
    logger.fatal(
      { store, release, minReader: before.minReader, migratedBy: before.migratedBy },
      `store ${store} needs release ${before.minReader} or newer; this is ${release}: refusing to start (nothing was changed)`,
    );
    throw new StoreRefusal(`store ${store} needs release ${before.minReader} or newer`);
  }

  const ctx: MigrationContext = { db, client: opts.client, namespace: opts.namespace, logger };
  const log = (level: "info" | "warn" | "error" | "debug") => (record: Record<string, unknown>) =>
    logger[level]({ store, ...record }, `store migration ${String(record.event ?? "")}`.trim());
  const umzug = new Umzug({
    migrations: [...schema.migrations]
      .sort((a, b) => a.name.localeCompare(b.name))
      .map((m) => ({ name: m.name, up: () => m.up(ctx) })),
    storage: new MongoDBStorage({ collection: db.collection(STORE_MIGRATIONS_COLLECTION) as never }),
    logger: { info: log("info"), warn: log("warn"), error: log("error"), debug: log("debug") },
  });
  const leases = db.collection(STORE_VERSION_COLLECTION) as unknown as Collection<JobLeaseDoc>;
  const ran: string[] = [];
  while ((await umzug.pending()).length > 0) {
    const migrated = await whileHolding(leases, "migrating", MIGRATING_LEASE_MS, async (renew) => {
      const renewals = keepAlive(`the migrations of ${store}`, MIGRATING_LEASE_MS / 3, renew, logger);
      try {
        ran.push(...(await umzug.up()).map((m) => m.name));
      } catch (err) {
        const cause = (err as { cause?: Error }).cause ?? (err as Error);
        const migration = (err as { migration?: { name?: string } }).migration?.name;
        logger.error(
          { store, release, migration, err: { message: cause.message } },
          `store migration ${migration ?? "(unknown)"} of ${store} failed: not starting; the data is as the previous release left it, and the next start runs it again`,
        );
        throw new StoreRefusal(`store migration ${migration ?? ""} failed: ${cause.message}`);
      } finally {
        await renewals.stop();
      }
      return true;
    });
    // Another replica migrates: wait for it to finish, or for its lease to run out.
    if (!migrated) await new Promise((resolve) => setTimeout(resolve, pollMs));
  }

  const mark = await recordMark(db, schema, release, before);
  if (ran.length > 0)
    logger.info(
      { store, release, migrations: ran, minReader: mark.minReader, collections: mark.collections },
      "store migrated",
    );
  return { ran, mark };
}

/** Creates or raises the mark, conditional on what was read, so replicas converge. */
async function recordMark(db: Db, schema: StoreSchema, release: string, read: StoreMark | null): Promise<StoreMark> {
  const marks = db.collection(STORE_VERSION_COLLECTION) as unknown as Collection<StoreMark>;
  for (let current = read; ; current = await readMark(db)) {
    const collections = { ...current?.collections };
    for (const [name, version] of Object.entries(schema.collections))
      collections[name] = Math.max(collections[name] ?? 0, version);
    const minReader =
      current && compareReleases(current.minReader, schema.readableFrom) >= 0 ? current.minReader : schema.readableFrom;
    const kept: Record<string, number> = current?.collections ?? {};
    if (current && minReader === current.minReader && Object.entries(collections).every(([n, v]) => kept[n] === v))
      return current;
    const next: StoreMark = { _id: "store", minReader, collections, migratedBy: release, migratedAt: new Date() };
    const written = current
      ? (await marks.replaceOne({ _id: "store", minReader: current.minReader, migratedAt: current.migratedAt }, next))
          .matchedCount === 1
      : await insertIfNew(marks, next);
    if (written) return next;
  }
}
