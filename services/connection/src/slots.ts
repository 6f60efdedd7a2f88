import type { Collection } from "mongodb";
import { isDuplicateKey, updateVersioned } from "@pi/common/store/persistence";
import { rateLimitedError } from "@pi/common/rpc/errors";
import { PENDING_RETRY_AFTER_SECONDS, repairedHolds, type Holds } from "./bounds.js";
import { deletePastOpenings, type OpeningsDoc } from "./openings.js";
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

export const pendingBoundReached = () =>
  rateLimitedError(
    "the partner holds as many pending connections in this mode as its bound allows",
    PENDING_RETRY_AFTER_SECONDS,
  );

const holdField = (connectionId: string) => `holds.${connectionId}`;

/** Takes a slot for `connectionId` ("held" when it had one); throws the 429 when all `limit` are taken. */
export async function takeSlot(
  slots: Collection<SlotsDoc>,
  partnerId: string,
  mode: ConnectionMode,
  connectionId: string,
  limit: number,
  now: Date,
): Promise<"taken" | "held"> {
  const _id = slotsKey(partnerId, mode);
  // A partner at its bound is answered from one read (a flood of refused requests costs one lookup each).
  const current = await slots.findOne({ _id }, { projection: { count: 1, [holdField(connectionId)]: 1 } });
  if (current && current.count >= limit && !(connectionId in (current.holds ?? {}))) throw pendingBoundReached();
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      // Matches only while a slot is free and this connection holds none; with no document yet, the
      // upsert creates it. A full document does not match, and the upsert's insert then fails on _id.
      await slots.updateOne(
        { _id, count: { $lt: limit }, [holdField(connectionId)]: { $exists: false } },
        { $set: { [holdField(connectionId)]: now, partnerId, mode }, $inc: { count: 1, version: 1 } },
        { upsert: true },
      );
      return "taken";
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
    const doc = await slots.findOne({ _id });
    if (doc && connectionId in (doc.holds ?? {})) return "held";
    // Full, unless a concurrent first write created the document between our filter and insert.
    if (doc && doc.count >= limit) throw pendingBoundReached();
  }
  throw pendingBoundReached();
}

export async function releaseSlot(
  slots: Collection<SlotsDoc>,
  partnerId: string,
  mode: ConnectionMode,
  connectionId: string,
): Promise<void> {
  await slots.updateOne(
    { _id: slotsKey(partnerId, mode), [holdField(connectionId)]: { $exists: true } },
    { $unset: { [holdField(connectionId)]: "" }, $inc: { count: -1, version: 1 } },
  );
}

/** A slot whose connection is not pending is kept this long: a request between its two writes. */
export const SLOT_GRACE_MS = 60_000;

type Holders = Pick<
  Collection<{ _id: string; partnerId: string; mode: ConnectionMode; status: InternalStatus }>,
  "find"
>;

export async function repairSlots(
  store: { connections: Holders; slots: Collection<SlotsDoc> },
  now: Date,
  renew: () => Promise<boolean> = async () => true,
): Promise<number> {
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

export async function repairCounters(
  store: { connections: Holders; slots: Collection<SlotsDoc>; openings: Collection<OpeningsDoc> },
  now: Date,
  renew: () => Promise<boolean> = async () => true,
): Promise<number> {
  await deletePastOpenings(store.openings, now);
  return repairSlots(store, now, renew);
}
