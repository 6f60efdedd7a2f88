import type { Collection, Document, WithId } from "mongodb";
import { asFilter, asUpdate } from "@pi/common/background/lease";
import { isDuplicateKey, updateVersioned } from "@pi/common/store/persistence";
import { rateLimitedError } from "@pi/common/rpc/errors";
import {
  dayKey,
  oldestKeptDay,
  PENDING_RETRY_AFTER_SECONDS,
  repairedHolds,
  secondsUntilNextDay,
  type Holds,
} from "./bounds.js";
import type { ConnectionMode, InternalStatus } from "./state-machine.js";

// The pending-connection bound across replicas (docs/connections.md, "Bounds"): one counter document
// per partner and mode, each change ONE conditional update. A slot is a field of `holds` named by its
// connection's id; `count` sits beside them for the filter. The repair recounts what a crash left off.

export interface SlotsDoc {
  _id: string; // `<partnerId>:<mode>`
  partnerId: string;
  mode: ConnectionMode;
  count: number;
  holds: Holds;
  version: number;
}

export const slotsKey = (partnerId: string, mode: ConnectionMode) => `${partnerId}:${mode}`;

/**
 * Counts one more in the counter `_id` while it is below `limit`, by ONE conditional update: with no
 * document yet the upsert creates it; a full one does not match, and the upsert's insert then fails on
 * _id. A partner at its bound is answered from one read (a flood of refused requests costs one lookup
 * each). "held" when `held` finds the caller counted already.
 */
async function countOne<D extends { _id: string; count: number }>(
  collection: Collection<D>,
  _id: string,
  limit: number,
  o: { filter?: Document; update: Document; projection?: Document; held?(doc: WithId<D>): boolean },
): Promise<"taken" | "held" | "full"> {
  const read = () => collection.findOne(asFilter<D>({ _id }), { projection: { count: 1, ...o.projection } });
  const current = await read();
  if (current && current.count >= limit && !o.held?.(current)) return "full";
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await collection.updateOne(asFilter<D>({ _id, count: { $lt: limit }, ...o.filter }), asUpdate<D>(o.update), {
        upsert: true,
      });
      return "taken";
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
    const doc = await read();
    if (doc && o.held?.(doc)) return "held";
    // Full, unless a concurrent first write created the document between our filter and insert.
    if (doc && doc.count >= limit) return "full";
  }
  return "full";
}

/** The connection a slot is for. */
export type SlotHolder = { _id: string; partnerId: string; mode: ConnectionMode };

/** Takes a slot for the connection ("held" when it had one); throws the 429 when all `limit` are taken. */
export async function takeSlot(
  slots: Collection<SlotsDoc>,
  { _id: connectionId, partnerId, mode }: SlotHolder,
  limit: number,
  now: Date,
): Promise<"taken" | "held"> {
  const hold = `holds.${connectionId}`;
  const taken = await countOne(slots, slotsKey(partnerId, mode), limit, {
    filter: { [hold]: { $exists: false } },
    update: { $set: { [hold]: now, partnerId, mode }, $inc: { count: 1, version: 1 } },
    projection: { [hold]: 1 },
    held: (doc) => connectionId in (doc.holds ?? {}),
  });
  if (taken === "full")
    throw rateLimitedError(
      "the partner holds as many pending connections in this mode as its bound allows",
      PENDING_RETRY_AFTER_SECONDS,
    );
  return taken;
}

export async function releaseSlot(slots: Collection<SlotsDoc>, { _id: connectionId, partnerId, mode }: SlotHolder) {
  await slots.updateOne(
    { _id: slotsKey(partnerId, mode), [`holds.${connectionId}`]: { $exists: true } },
    { $unset: { [`holds.${connectionId}`]: "" }, $inc: { count: -1, version: 1 } },
  );
}

// The per-day bound on connections opened: one counter per partner, mode and UTC day, counted as the slots are.

export interface OpeningsDoc {
  _id: string; // `<partnerId>:<mode>:<YYYY-MM-DD>`
  partnerId: string;
  mode: ConnectionMode;
  day: string;
  count: number;
}

export const openingsKey = (partnerId: string, mode: ConnectionMode, day: string) => `${partnerId}:${mode}:${day}`;

/** Takes one of the day's openings (its counter's id); past the bound, the same 429 for every address, to retry at midnight UTC. */
export async function takeOpening(
  openings: Collection<OpeningsDoc>,
  partnerId: string,
  mode: ConnectionMode,
  limit: number,
  now: Date,
): Promise<string> {
  const day = dayKey(now);
  const _id = openingsKey(partnerId, mode, day);
  const update = { $inc: { count: 1 }, $setOnInsert: { partnerId, mode, day } };
  if ((await countOne(openings, _id, limit, { update })) === "full")
    throw rateLimitedError(
      "the partner opened as many connections in this mode today (UTC) as its bound allows",
      secondsUntilNextDay(now),
    );
  return _id;
}

export async function releaseOpening(openings: Collection<OpeningsDoc>, id: string): Promise<void> {
  await openings.updateOne({ _id: id, count: { $gt: 0 } }, { $inc: { count: -1 } });
}

/** A slot whose connection is not pending is kept this long: a request between its two writes. */
export const SLOT_GRACE_MS = 60_000;

type Holders = Pick<
  Collection<{ _id: string; partnerId: string; mode: ConnectionMode; status: InternalStatus }>,
  "find"
>;

/** Deletes past days' opening counters, then recounts the pending slots; the number of partners' slots repaired. */
export async function repairCounters(
  store: { connections: Holders; slots: Collection<SlotsDoc>; openings: Collection<OpeningsDoc> },
  now: Date,
  renew: () => Promise<boolean> = async () => true,
): Promise<number> {
  await store.openings.deleteMany({ day: { $lt: oldestKeptDay(now) } });
  let repaired = 0;
  for await (const doc of store.slots.find({})) {
    if (!(await renew())) break;
    const holding = await store.connections
      .find(
        { partnerId: doc.partnerId, mode: doc.mode, status: { $in: ["pending", "declined"] } },
        { projection: { _id: 1 } },
      )
      .toArray();
    const next = repairedHolds(
      doc.holds ?? {},
      holding.map((c) => c._id),
      now,
      SLOT_GRACE_MS,
    );
    if (!next) continue;
    if (await updateVersioned(store.slots, doc, { $set: { holds: next, count: Object.keys(next).length } })) repaired++;
  }
  return repaired;
}
