import type { Collection, Filter } from "mongodb";
import type { ConnectionDoc } from "./store.js";

const ENDED: ConnectionDoc["status"][] = ["revoked", "expired"];

/** Never later than the reopen interval allows: deleted earlier, its address could be asked again sooner. */
export function endedConnectionCutoff(now: Date, retentionSeconds: number, reopenIntervalSeconds: number): Date {
  return new Date(now.getTime() - Math.max(retentionSeconds, reopenIntervalSeconds) * 1000);
}

/** The connections due for deletion at `cutoff`: ended, unchanged since before it, nothing to publish. */
export const endedBefore = (cutoff: Date): Filter<ConnectionDoc> => ({
  status: { $in: ENDED },
  updatedAt: { $lt: cutoff },
  "outbox.0": { $exists: false },
  "audit.0": { $exists: false },
});

/** Deletes the connections due at `cutoff`, `batch` at a time, repeating the filter (one reopened meanwhile stays). */
export async function deleteEndedConnections(
  connections: Collection<ConnectionDoc>,
  cutoff: Date,
  renew: () => Promise<boolean> = async () => true,
  batch = 500,
): Promise<number> {
  let deleted = 0;
  for (;;) {
    const due = await connections
      .find(endedBefore(cutoff), { projection: { _id: 1 } })
      .limit(batch)
      .toArray();
    if (due.length === 0 || !(await renew())) break;
    deleted += (await connections.deleteMany({ $and: [{ _id: { $in: due.map((d) => d._id) } }, endedBefore(cutoff)] }))
      .deletedCount;
    if (due.length < batch) break;
  }
  return deleted;
}
