import { whileHolding } from "@pi/common/background/lease";
import type { Logger } from "@pi/common/runtime/logger";
import { ABANDONED_AFTER_MS, deleteSegments } from "./staging.js";
import { segmentCount, type FileDoc, type FileMode, type FileStore } from "./store.js";
import { bytesDeleted, repairUsage } from "./usage.js";

// Retention of health data (docs/security.md, "Data at rest"): a final file's bytes, extraction and
// metadata go after their retention; the record stays, so GET /v1/files/{id} keeps its status.

/** How long each mode's data is kept, in ms. */
export type RetentionPolicy = Record<FileMode, number>;

/** The files of `mode` whose data is due at `now`: final, not swept yet, accepted before the cut-off. */
export const dueForRetention = (mode: FileMode, now: Date, policy: RetentionPolicy) => ({
  mode,
  purgedAt: null,
  status: { $in: ["processed", "failed"] as FileDoc["status"][] },
  createdAt: { $lte: new Date(now.getTime() - policy[mode]) },
});

/** The data key first (every copy unreadable at once), then result and bytes, last `purgedAt` (off the usage); repeatable. */
export async function purgeFile(
  store: FileStore,
  file: Pick<FileDoc, "_id" | "partnerId" | "mode" | "blobId" | "size">,
  now: Date,
): Promise<void> {
  await store.files.updateOne(
    { _id: file._id, status: { $in: ["processed", "failed"] } },
    { $set: { dataKey: null, sealedMeta: null } },
  );
  await store.extractions.deleteOne({ _id: file._id });
  await deleteSegments(store, file.blobId, segmentCount(file.size));
  const { modifiedCount } = await store.files.updateOne(
    { _id: file._id, purgedAt: null },
    { $set: { purgedAt: now, updatedAt: now } },
  );
  if (modifiedCount === 1) await bytesDeleted(store, file.partnerId, file.mode, file.size);
}

/** One round: every file due, in batches per mode, then the repair of the usage counters; stops once `renew` fails. */
export async function sweepRetention(
  store: FileStore,
  policy: RetentionPolicy,
  now = new Date(),
  renew: () => Promise<boolean> = async () => true,
  batch = 200,
): Promise<number> {
  let swept = 0;
  for (const mode of ["test", "live"] as const) {
    for (;;) {
      const due = await store.files
        .find(dueForRetention(mode, now, policy), { projection: { _id: 1, partnerId: 1, mode: 1, blobId: 1, size: 1 } })
        .limit(batch)
        .toArray();
      for (const file of due) {
        if (!(await renew())) return swept;
        await purgeFile(store, file, now);
        swept++;
      }
      if (due.length < batch) break;
    }
  }
  if (await renew()) await repairUsage(store, now, ABANDONED_AFTER_MS);
  return swept;
}

export const RETENTION_LEASE = "retention-sweep";

/** The periodic round: only the replica that holds the sweep's lease runs it; undefined when another does. */
export function retentionRound(
  store: FileStore,
  policy: RetentionPolicy,
  leaseMs: number,
  logger: Logger,
  now = () => new Date(),
) {
  return whileHolding(store.leases, RETENTION_LEASE, leaseMs, async (renew) => {
    const swept = await sweepRetention(store, policy, now(), renew);
    if (swept > 0) logger.info({ swept }, "file data past retention deleted");
    return swept;
  });
}
