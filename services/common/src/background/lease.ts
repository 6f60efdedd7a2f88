import { randomUUID } from "node:crypto";
import type { Collection, Document, Filter, UpdateFilter, WithId } from "mongodb";
import type { Logger } from "../runtime/logger.js";
import { every } from "./periodic.js";

// The one lease: a right on a document (or a job) held until a time, taken by one conditional
// update (of concurrent takers exactly one wins), kept alive by its holder (keepAlive), ended with
// its outcome in the same write. A holder that dies leaves it to run out, and the next taker goes on.

// Field names are given at run time, which the driver's types cannot check.
export const asFilter = <T extends Document>(f: Document) => f as Filter<T>;
export const asUpdate = <T extends Document>(u: Document) => u as UpdateFilter<T>;

export interface LeaseFields {
  until: string;
  holder: string;
}

/** The documents whose lease is free at `now`: never taken, released, or run out. */
export function leaseFree(fields: LeaseFields, now: Date): Document {
  return { $or: [{ [fields.until]: null }, { [fields.until]: { $lte: now } }] };
}

const withLease = <T extends Document>(
  update: UpdateFilter<T> | undefined,
  fields: LeaseFields,
  until: unknown,
  holder: unknown,
) =>
  asUpdate<T>({
    ...update,
    $set: { ...(update?.$set as Document | undefined), [fields.until]: until, [fields.holder]: holder },
  });

/** Takes the lease of the one document matching `filter` whose lease is free, applying `update` in the same write. */
export async function takeLease<T extends Document>(
  collection: Collection<T>,
  filter: Filter<T>,
  fields: LeaseFields,
  opts: { now?: Date; ms: number; update?: UpdateFilter<T> },
): Promise<{ doc: WithId<T>; holder: string; until: Date } | null> {
  const now = opts.now ?? new Date();
  const holder = randomUUID();
  const until = new Date(now.getTime() + opts.ms);
  const doc = await collection.findOneAndUpdate(
    asFilter<T>({ $and: [filter, leaseFree(fields, now)] }),
    withLease(opts.update, fields, until, holder),
    { returnDocument: "after" },
  );
  return doc ? { doc, holder, until } : null;
}

/** False when the lease is no longer this holder's. */
export async function renewLease<T extends Document>(
  collection: Collection<T>,
  id: unknown,
  fields: LeaseFields,
  holder: string,
  ms: number,
): Promise<boolean> {
  const res = await collection.updateOne(
    asFilter<T>({ _id: id, [fields.holder]: holder }),
    asUpdate<T>({ $set: { [fields.until]: new Date(Date.now() + ms) } }),
  );
  return res.matchedCount === 1;
}

/** Ends a held lease, applying `update` in the same write; null (nothing written) when it is no longer this holder's. */
export function endLease<T extends Document>(
  collection: Collection<T>,
  id: unknown,
  fields: LeaseFields,
  holder: string,
  opts: { filter?: Filter<T>; update?: UpdateFilter<T> } = {},
): Promise<WithId<T> | null> {
  return collection.findOneAndUpdate(
    asFilter<T>({ ...opts.filter, _id: id, [fields.holder]: holder }),
    withLease(opts.update, fields, null, null),
    { returnDocument: "after" },
  );
}

export interface JobLeaseDoc {
  _id: string;
  until: Date | null;
  holder: string | null;
}

const JOB_LEASE: LeaseFields = { until: "until", holder: "holder" };

// Undefined when another replica holds the lease; `renew` says false once another may have taken over.
// Leases use the real clock, whatever the task's.
export async function whileHolding<T>(
  collection: Collection<JobLeaseDoc>,
  name: string,
  ms: number,
  task: (renew: () => Promise<boolean>) => Promise<T>,
): Promise<T | undefined> {
  await collection.insertOne({ _id: name, until: null, holder: null }).catch((err: { code?: unknown }) => {
    if (err.code !== 11000) throw err; // E11000: it exists already
  });
  const lease = await takeLease(collection, { _id: name }, JOB_LEASE, { ms });
  if (!lease) return undefined;
  try {
    return await task(() => renewLease(collection, name, JOB_LEASE, lease.holder, ms));
  } finally {
    await endLease(collection, name, JOB_LEASE, lease.holder).catch(() => undefined);
  }
}

/** Renews a held lease every `everyMs` (a third of it or less: one failed renewal does not lose it). */
export function keepAlive(
  name: string,
  everyMs: number,
  renew: () => Promise<boolean>,
  logger: Logger,
): { stop(): Promise<void> } {
  const renewals = every(
    `keeping ${name} alive`,
    everyMs,
    async () => {
      if (!(await renew())) void renewals.stop();
    },
    logger,
    { runAtStart: false },
  );
  return renewals;
}
