import type { Collection } from "mongodb";
import { isDuplicateKey } from "@pi/common/store/persistence";
import { rateLimitedError } from "@pi/common/rpc/errors";
import { dayKey, oldestKeptDay, secondsUntilNextDay } from "./bounds.js";
import type { ConnectionMode } from "./state-machine.js";

// The per-day bound on connections opened (docs/connections.md, "Bounds"), as slots.ts: one counter
// per partner, mode and UTC day, taken by ONE conditional update.

export interface OpeningsDoc {
  _id: string; // `<partnerId>:<mode>:<YYYY-MM-DD>`
  partnerId: string;
  mode: ConnectionMode;
  day: string;
  count: number;
}

export const openingsKey = (partnerId: string, mode: ConnectionMode, day: string) => `${partnerId}:${mode}:${day}`;

/** The answer past the bound: the same for every address, to retry at midnight UTC. */
export const dailyBoundReached = (now: Date) =>
  rateLimitedError(
    "the partner opened as many connections in this mode today (UTC) as its bound allows",
    secondsUntilNextDay(now),
  );

export async function takeOpening(
  openings: Collection<OpeningsDoc>,
  partnerId: string,
  mode: ConnectionMode,
  limit: number,
  now: Date,
): Promise<string> {
  const day = dayKey(now);
  const _id = openingsKey(partnerId, mode, day);
  const current = await openings.findOne({ _id }, { projection: { count: 1 } });
  if (current && current.count >= limit) throw dailyBoundReached(now);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      // A full document does not match, and the upsert's insert then fails on _id.
      await openings.updateOne(
        { _id, count: { $lt: limit } },
        { $inc: { count: 1 }, $setOnInsert: { partnerId, mode, day } },
        { upsert: true },
      );
      return _id;
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
    // Full, unless a concurrent first write created the document between our filter and insert.
    const doc = await openings.findOne({ _id }, { projection: { count: 1 } });
    if (doc && doc.count >= limit) break;
  }
  throw dailyBoundReached(now);
}

export async function releaseOpening(openings: Collection<OpeningsDoc>, id: string): Promise<void> {
  await openings.updateOne({ _id: id, count: { $gt: 0 } }, { $inc: { count: -1 } });
}

export async function deletePastOpenings(openings: Collection<OpeningsDoc>, now: Date): Promise<number> {
  return (await openings.deleteMany({ day: { $lt: oldestKeptDay(now) } })).deletedCount;
}
