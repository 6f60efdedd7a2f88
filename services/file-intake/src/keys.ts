import { setTimeout as sleep } from "node:timers/promises";
import { decide } from "./idempotency.js";
import { withDocLock } from "./doc-lock.js";
import { keyLockKey, type FileStore, type KeyDoc } from "./store.js";

export type ClaimOutcome = { kind: "owned" } | { kind: "replay"; fileId: string } | { kind: "conflict" };

export interface KeyTiming {
  ttlMs: number;
  /** How long a claim may stay uncommitted before it counts as abandoned (its owner died). */
  claimLeaseMs: number;
  /** How often a request waiting on another's claim looks again. */
  pollMs: number;
}

function isDuplicateKey(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === 11000;
}

/**
 * Idempotency keys in MongoDB, on single-document atomicity only: a claim is an upsert on the
 * unique (partnerId, key) index, so of two concurrent requests exactly one inserts; the other reads
 * the winner's record and waits for it to be committed (then replays it) or released (then claims).
 * Every write of a key also takes the key's lock in this process (doc-lock.ts: FerretDB v1 can lose
 * concurrent updates of one document).
 */
export class IdempotencyKeys {
  constructor(
    private readonly store: FileStore,
    private readonly timing: KeyTiming,
  ) {}

  async claim(partnerId: string, key: string, fingerprint: string, fileId: string, signal?: AbortSignal): Promise<ClaimOutcome> {
    for (;;) {
      signal?.throwIfAborted();
      const now = new Date();
      let stored: KeyDoc | null;
      try {
        stored = await this.locked(partnerId, key, () => this.store.keys.findOneAndUpdate(
          { partnerId, key },
          {
            $setOnInsert: {
              partnerId,
              key,
              fingerprint,
              fileId,
              state: "claimed",
              claimedAt: now,
              expiresAt: new Date(now.getTime() + this.timing.ttlMs),
            },
          },
          { upsert: true, returnDocument: "after" },
        ));
      } catch (err) {
        if (isDuplicateKey(err)) continue; // lost the insert race: read the winner's record
        throw err;
      }
      if (!stored) continue;
      const decision = decide(stored, { fingerprint, fileId }, now, this.timing.claimLeaseMs);
      switch (decision.kind) {
        case "owned":
        case "replay":
        case "conflict":
          return decision;
        case "expired":
          await this.locked(partnerId, key, () => this.store.keys.deleteOne({ _id: stored._id, fileId: stored.fileId }));
          continue;
        case "abandoned": {
          // The owner may have died between writing the file and committing the key.
          const written = await this.store.files.findOne({ _id: stored.fileId }, { projection: { _id: 1 } });
          await this.locked(partnerId, key, async () => {
            if (written) await this.store.keys.updateOne({ _id: stored._id, fileId: stored.fileId, state: "claimed" }, { $set: { state: "committed" } });
            else await this.store.keys.deleteOne({ _id: stored._id, fileId: stored.fileId, state: "claimed" });
          });
          continue;
        }
        case "wait":
          await sleep(this.timing.pollMs);
          continue;
      }
    }
  }

  /** The file of this claim is written: later requests with the same payload replay it. */
  async commit(partnerId: string, key: string, fileId: string): Promise<void> {
    const now = new Date();
    await this.locked(partnerId, key, () =>
      this.store.keys.updateOne({ partnerId, key, fileId }, { $set: { state: "committed", expiresAt: new Date(now.getTime() + this.timing.ttlMs) } }),
    );
  }

  /** The request was refused after claiming: the key is free again, as if never used. */
  async release(partnerId: string, key: string, fileId: string): Promise<void> {
    await this.locked(partnerId, key, () => this.store.keys.deleteOne({ partnerId, key, fileId, state: "claimed" }));
  }

  private locked<T>(partnerId: string, key: string, fn: () => Promise<T>): Promise<T> {
    return withDocLock(keyLockKey(this.store, partnerId, key), fn);
  }

  /** Expiry by sweep (no TTL indexes on FerretDB); reads already treat an expired key as absent. */
  async sweep(now = new Date()): Promise<number> {
    const res = await this.store.keys.deleteMany({ expiresAt: { $lte: now } });
    return res.deletedCount;
  }
}
