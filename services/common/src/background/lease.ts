import { randomUUID } from "node:crypto";
import type { Collection, Document, Filter, UpdateFilter, WithId } from "mongodb";
import type { Logger } from "../logger.js";
import { insertIfNew } from "../persistence.js";
import { every } from "./periodic.js";

// The one lease: a right on a document (or a job) held until a time, taken by one conditional
// update (of concurrent takers exactly one wins), kept alive by its holder (keepAlive), ended with
// its outcome in the same write. A holder that dies leaves it to run out, and the next taker goes on.

type AnyCollection<T extends Document> = Collection<T>;
const asFilter = <T extends Document>(f: Document) => f as Filter<T>;
const asUpdate = <T extends Document>(u: Document) => u as UpdateFilter<T>;

/** Where a document keeps its lease: the time it ends and the token of its holder. */
export interface LeaseFields {
  until: string;
  holder: string;
}

/** The documents whose lease (under `fields`) is free at `now`: never taken, released, or run out. */
export function leaseFree(fields: LeaseFields, now: Date): Document {
  return { $or: [{ [fields.until]: null }, { [fields.until]: { $lte: now } }] };
}

export interface Lease<T> {
  doc: WithId<T>;
  holder: string;
  until: Date;
}

/**
 * Takes the lease of the one document matching `filter` whose lease is free, applying `update` in
 * the same write: of concurrent takers exactly one gets it. The holder keeps it by renewing before
 * it runs out; a holder that dies leaves it to run out, and the next taker goes on.
 */
export async function takeLease<T extends Document>(
  collection: AnyCollection<T>,
  filter: Filter<T>,
  fields: LeaseFields,
  opts: { now?: Date; ms: number; update?: UpdateFilter<T> },
): Promise<Lease<T> | null> {
  const now = opts.now ?? new Date();
  const holder = randomUUID();
  const until = new Date(now.getTime() + opts.ms);
  const update = opts.update ?? {};
  const doc = await collection.findOneAndUpdate(
    asFilter<T>({ $and: [filter, leaseFree(fields, now)] }),
    asUpdate<T>({
      ...update,
      $set: { ...((update.$set as Document | undefined) ?? {}), [fields.until]: until, [fields.holder]: holder },
    }),
    { returnDocument: "after" },
  );
  return doc ? { doc, holder, until } : null;
}

/** Pushes a held lease forward; false when it is no longer this holder's. */
export async function renewLease<T extends Document>(
  collection: AnyCollection<T>,
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

/**
 * Ends a held lease, applying `update` (and matching `filter`) in the same write. null when the
 * lease is no longer this holder's (it ran out and another took over): nothing was written.
 */
export function endLease<T extends Document>(
  collection: AnyCollection<T>,
  id: unknown,
  fields: LeaseFields,
  holder: string,
  opts: { filter?: Filter<T>; update?: UpdateFilter<T> } = {},
): Promise<WithId<T> | null> {
  const update = opts.update ?? {};
  return collection.findOneAndUpdate(
    asFilter<T>({ ...opts.filter, _id: id, [fields.holder]: holder }),
    asUpdate<T>({
      ...update,
      $set: { ...((update.$set as Document | undefined) ?? {}), [fields.until]: null, [fields.holder]: null },
    }),
    { returnDocument: "after" },
  );
}

/** A lease that stands for a job rather than a document (one sweep at a time across replicas). */
export interface JobLeaseDoc {
  _id: string;
  until: Date | null;
  holder: string | null;
}

const JOB_LEASE: LeaseFields = { until: "until", holder: "holder" };

/**
 * Runs `task` only while this process holds the lease named `name` (a document of `collection`,
 * created on first use): of replicas running the same periodic job, one runs it and the others
 * skip the round (undefined). The task gets `renew`, to call between steps: false means the lease
 * ran out and another replica may have taken over, so the task should stop. Leases use the real
 * clock, whatever clock the task itself is given.
 */
export async function whileHolding<T>(
  collection: AnyCollection<JobLeaseDoc>,
  name: string,
  ms: number,
  task: (renew: () => Promise<boolean>) => Promise<T>,
): Promise<T | undefined> {
  await insertIfNew(collection, { _id: name, until: null, holder: null });
  const lease = await takeLease(collection, { _id: name }, JOB_LEASE, { ms });
  if (!lease) return undefined;
  try {
    return await task(() => renewLease(collection, name, JOB_LEASE, lease.holder, ms));
  } finally {
    await endLease(collection, name, JOB_LEASE, lease.holder).catch(() => undefined);
  }
}

export interface KeptAlive {
  /** Stops renewing; waits for a renewal in flight. */
  stop(): Promise<void>;
}

/**
 * Renews a held lease every `everyMs` (a third of its length or less, so that one failed renewal
 * does not lose it) until stopped. `renew` answering false means the lease is no longer this
 * holder's: the renewals stop. A renewal that fails is logged and tried again at the next round.
 */
export function keepAlive(name: string, everyMs: number, renew: () => Promise<boolean>, logger: Logger): KeptAlive {
  const renewals = every(
    `keeping ${name} alive`,
    everyMs,
    async () => {
      if (!(await renew())) void renewals.stop();
    },
    logger,
    { runAtStart: false },
  );
  return { stop: () => renewals.stop() };
}
