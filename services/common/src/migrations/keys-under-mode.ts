import type { Collection } from "mongodb";
import { insertIfNew } from "../persistence.js";
import type { StoreMigration } from "../store-versions.js";

// file-intake 0001. Release 4e36e67 kept an Idempotency-Key under `<partner>:<key>`, shared by the
// partner's two credential modes, with `claimedAt`; since 1.0.0 a key is kept under
// `<partner>:<mode>:<key>` with `mode` and `claimedUntil` (docs/files.md, "Idempotency"), and
// nothing read the old ones: a retry got a second file, and other bytes under the key a 202.
// This moves each old key under the mode of the file it names. The shapes are written out here as
// they were: a migration never follows later changes of the code.

/** A key as 4e36e67 stored it: no `mode`. */
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
export interface KeyUnderMode {
  _id: string;
  partnerId: string;
  mode: "live" | "test";
  key: string;
  fingerprint: string;
  fileId: string;
  state: "claimed" | "committed";
  claimedUntil: Date;
  expiresAt: Date;
}

/**
 * The key moved under the mode of its file, or null when it named no stored file: a claim whose
 * request never stored one, which is then as if never made (what its owner's end would have done).
 * A claim's lease ends when its old claim time was: its request is long gone (the old release
 * stopped), so a retry takes it over at once.
 */
export function keyUnderMode(old: KeyBeforeModes, fileMode: "live" | "test" | null): KeyUnderMode | null {
  if (fileMode === null) return null;
  return {
    _id: `${old.partnerId}:${fileMode}:${old.key}`,
    partnerId: old.partnerId,
    mode: fileMode,
    key: old.key,
    fingerprint: old.fingerprint,
    fileId: old.fileId,
    state: old.state,
    claimedUntil: old.claimedAt,
    expiresAt: old.expiresAt,
  };
}

export const keysUnderMode: StoreMigration = {
  name: "0001-idempotency-keys-under-mode",
  about: "moves Idempotency-Keys stored by 4e36e67 (<partner>:<key>) under their file's mode (<partner>:<mode>:<key>)",
  async up({ db, logger }) {
    const keys = db.collection("idempotency_keys") as unknown as Collection<KeyBeforeModes | KeyUnderMode>;
    const files = db.collection<{ _id: string; mode: "live" | "test" }>("files");
    let moved = 0;
    let dropped = 0;
    // Each old key: its new one inserted (a key the newer release stored meanwhile under that id
    // wins), then the old one deleted. Stopped anywhere, the next run does what is left.
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
