import { ObjectId } from "mongodb";
import { ErrorReason, reasonOf, serviceError } from "@pi/common/rpc/errors";
import { insertIfNew, updateVersioned } from "@pi/common/store/persistence";
import {
  holdGrowth,
  initialHold,
  quotaVerdict,
  repairedUsage,
  STORE_FULL_RETRY_AFTER_SECONDS,
  usageKey,
  type Growth,
  type QuotaLimits,
  type Verdict,
} from "./quota.js";
import type { FileMode, FileStore, UsageDoc } from "./store.js";

// The storage quota's counters (docs/files.md, "Storage quota"): single-document conditional updates only.

export const quotaExceeded = (retryAfterSeconds?: number) =>
  serviceError(
    ErrorReason.STORAGE_QUOTA_EXCEEDED,
    "the partner's stored files would pass its storage quota",
    undefined,
    retryAfterSeconds,
  );
export const storeFull = () =>
  serviceError(
    ErrorReason.STORE_FULL,
    "the file store is at its high-water mark",
    undefined,
    STORE_FULL_RETRY_AFTER_SECONDS,
  );

/** How long a replica trusts its last reading of the store's total. */
const STORE_TOTAL_TTL_MS = 1000;

/** The store-wide high-water mark, read once a second per replica (the chart allows for what passes it meanwhile). */
export class StoreFill {
  private reading: { at: number; total: Promise<number> } | undefined;

  constructor(
    private readonly store: FileStore,
    private readonly markBytes: number,
  ) {}

  async hasRoom(bytes: number): Promise<boolean> {
    if (!this.reading || Date.now() - this.reading.at >= STORE_TOTAL_TTL_MS) {
      const total = this.store.usage
        .aggregate<{ used: number }>([{ $group: { _id: null, used: { $sum: "$used" } } }])
        .toArray()
        .then(([row]) => row?.used ?? 0);
      this.reading = { at: Date.now(), total };
      total.catch(() => (this.reading = undefined));
    }
    return (await this.reading.total) + bytes <= this.markBytes;
  }
}

export class StorageQuota {
  constructor(
    private readonly store: FileStore,
    private readonly limits: QuotaLimits,
    private readonly maxFileBytes: number,
    /** How often the retention sweep runs: the soonest stored bytes can go. */
    private readonly sweepEverySeconds: number,
    private readonly fill: StoreFill,
  ) {}

  /** Whether an upload declaring `declaredBytes` would fit now (reserves nothing); throws STORE_FULL. */
  async check(partnerId: string, mode: FileMode, declaredBytes: number | undefined): Promise<Verdict> {
    const { need } = initialHold(declaredBytes, this.maxFileBytes);
    if (!(await this.fill.hasRoom(need))) throw storeFull();
    return this.verdict(usageKey(partnerId, mode), this.limits[mode], need);
  }

  private async verdict(key: string, quota: number, need: number): Promise<Verdict> {
    const usage = await this.store.usage.findOne({ _id: key }, { projection: { stored: 1, used: 1 } });
    return quotaVerdict(usage ?? { stored: 0, used: 0 }, quota, need, this.sweepEverySeconds);
  }

  async reserve(partnerId: string, mode: FileMode, declaredBytes: number | undefined): Promise<Reservation> {
    const key = usageKey(partnerId, mode);
    const quota = this.limits[mode];
    const reservation = new Reservation(this.store, key, quota, this.maxFileBytes, this.fill);
    const hold = initialHold(declaredBytes, this.maxFileBytes);
    await reservation.grow(hold).catch(async (err: unknown) => {
      if (reasonOf(err)?.reason !== ErrorReason.STORAGE_QUOTA_EXCEEDED) throw err;
      // Refused before the body: when to retry depends on what is in the way (quotaVerdict).
      const verdict = await this.verdict(key, quota, hold.need);
      throw quotaExceeded(verdict.fits ? 1 : verdict.retryAfterSeconds);
    });
    return reservation;
  }
}

/** One upload's hold: grown while its bytes arrive, then settled or released. */
export class Reservation {
  private readonly id = new ObjectId().toHexString();
  private held = 0;
  private settled = false;

  constructor(
    private readonly store: FileStore,
    private readonly key: string,
    private readonly quota: number,
    private readonly maxFileBytes: number,
    private readonly fill: StoreFill,
  ) {}

  /** Adds `bytes` to the hold if both the store and the partner's usage have room, else says which has none. */
  private async take(bytes: number): Promise<"taken" | "store" | "quota"> {
    if (!(await this.fill.hasRoom(bytes))) return "store";
    const fits = { _id: this.key, used: { $lte: this.quota - bytes } };
    // Several entries of one upload are fine: settle and release pull them all by id.
    const add = { $inc: { used: bytes, version: 1 }, $push: { holds: { id: this.id, bytes, at: new Date() } } };
    let { matchedCount } = await this.store.usage.updateOne(fits, add);
    if (matchedCount === 0) {
      // The partner's first upload in this mode (or one racing it) creates the counter.
      await insertIfNew(this.store.usage, { _id: this.key, stored: 0, used: 0, holds: [], version: 0 });
      ({ matchedCount } = await this.store.usage.updateOne(fits, add));
    }
    if (matchedCount === 1) this.held += bytes;
    return matchedCount === 1 ? "taken" : "quota";
  }

  /** Reserves more when the bytes received passed the hold. */
  async cover(received: number): Promise<void> {
    await this.grow(holdGrowth(this.held, received, this.maxFileBytes));
  }

  /** Takes what it wants if that fits, else what it needs, or throws STORE_FULL or STORAGE_QUOTA_EXCEEDED. */
  async grow({ need, want }: Growth): Promise<void> {
    if (need === 0) return;
    let taken = await this.take(want);
    if (taken !== "taken" && want > need) taken = await this.take(need);
    if (taken === "taken") return;
    throw taken === "store" ? storeFull() : quotaExceeded();
  }

  async settle(size: number): Promise<void> {
    this.settled = true;
    const { matchedCount } = await this.store.usage.updateOne(
      { _id: this.key, "holds.id": this.id },
      { $inc: { stored: size, used: size - this.held, version: 1 }, $pull: { holds: { id: this.id } } },
    );
    // The repair dropped the hold as abandoned (an upload far longer than any can last).
    if (matchedCount === 0)
      await this.store.usage.updateOne({ _id: this.key }, { $inc: { stored: size, used: size, version: 1 } });
  }

  async release(): Promise<void> {
    if (this.settled || this.held === 0) return;
    await this.store.usage.updateOne(
      { _id: this.key, "holds.id": this.id },
      { $inc: { used: -this.held, version: 1 }, $pull: { holds: { id: this.id } } },
    );
  }
}

/** The retention sweep deleted a file's bytes: once per file (it calls this only for the update that marked it purged). */
export async function bytesDeleted(store: FileStore, partnerId: string, mode: FileMode, size: number): Promise<void> {
  await store.usage.updateOne({ _id: usageKey(partnerId, mode) }, { $inc: { stored: -size, used: -size, version: 1 } });
}

/** Sets every counter from the files: read before them, written only if unchanged (a file is inserted before it settles). */
export async function repairUsage(store: FileStore, now: Date, holdMaxAgeMs: number): Promise<number> {
  const counters = await store.usage.find({}).toArray();
  const sums = await store.files
    .aggregate<{ _id: { partnerId: string; mode: FileMode }; bytes: number }>([
      { $match: { purgedAt: null } },
      { $group: { _id: { partnerId: "$partnerId", mode: "$mode" }, bytes: { $sum: "$size" } } },
    ])
    .toArray();
  const stored = new Map(sums.map((s) => [usageKey(s._id.partnerId, s._id.mode), s.bytes]));
  let repaired = 0;
  for (const counter of counters) {
    const next = repairedUsage(counter, stored.get(counter._id) ?? 0, now, holdMaxAgeMs);
    stored.delete(counter._id);
    if (!next) continue;
    if (await updateVersioned(store.usage, counter, { $set: next })) repaired++;
  }
  // Files with no counter yet (stored before the quota existed).
  for (const [key, bytes] of stored)
    if (await insertIfNew<UsageDoc>(store.usage, { _id: key, stored: bytes, used: bytes, holds: [], version: 0 }))
      repaired++;
  return repaired;
}
