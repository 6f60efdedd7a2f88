import type { Collection } from "mongodb";
import { insertIfNew } from "../persistence.js";
import type { StoreMigration } from "../store-versions.js";

// file-intake 0001 (docs/upgrades.md): moves each Idempotency-Key 4e36e67 kept under `<partner>:<key>`
// under the mode of the file it names. The shapes are written out as they were: a migration never
// follows later changes of the code.

/** A key as 4e36e67 stored it. */
export interface KeyBeforeModes {
  _id: string;
  partnerId: string;
  key: string;
  fingerprint: string;
  fileId: string;
  state: "claimed" | "committed";
  claimedAt: Date;
  expiresAt: Date;
}

/** A key as 1.0.0 and later store it. */
export type KeyUnderMode = Omit<KeyBeforeModes, "claimedAt"> & { mode: "live" | "test"; claimedUntil: Date };

/** The key under its file's mode, or null when it named no stored file (as if the claim was never made). */
export function keyUnderMode(old: KeyBeforeModes, fileMode: "live" | "test" | null): KeyUnderMode | null {
  if (fileMode === null) return null;
  const { claimedAt, ...kept } = old;
  return { ...kept, _id: `${old.partnerId}:${fileMode}:${old.key}`, mode: fileMode, claimedUntil: claimedAt };
}

export const keysUnderMode: StoreMigration = {
  name: "0001-idempotency-keys-under-mode",
  about: "moves Idempotency-Keys stored by 4e36e67 (<partner>:<key>) under their file's mode (<partner>:<mode>:<key>)",
  async up({ db, logger }) {
    const keys = db.collection("idempotency_keys") as unknown as Collection<KeyBeforeModes | KeyUnderMode>;
    const files = db.collection<{ _id: string; mode: "live" | "test" }>("files");
    let moved = 0;
    let dropped = 0;
    // A key the newer release stored meanwhile under the new id wins. Resumable: the old one goes last.
    for await (const old of keys.find({ mode: { $exists: false } }) as AsyncIterable<KeyBeforeModes>) {
      const file = await files.findOne({ _id: old.fileId }, { projection: { mode: 1 } });
      const next = keyUnderMode(old, file?.mode ?? null);
      if (next) {
        await insertIfNew(keys, next);
        moved++;
      } else dropped++;
      await keys.deleteOne({ _id: old._id, mode: { $exists: false } });
    }
    logger.info({ moved, dropped }, "idempotency keys of 4e36e67 moved under their mode");
  },
};
