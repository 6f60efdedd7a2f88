import { setTimeout as sleep } from "node:timers/promises";
import { decide } from "./idempotency.js";
import { insertIfNew } from "@pi/common/store/persistence";
import { keepAlive, renewLease, type LeaseFields } from "@pi/common/background/lease";
import type { Logger } from "@pi/common/runtime/logger";
import { keyId, type FileMode, type FileStore, type KeyDoc } from "./store.js";

export type ClaimOutcome = { kind: "owned" } | { kind: "replay"; fileId: string } | { kind: "conflict" };

/** A claim is a lease held by its request (its fileId) until `claimedUntil`. */
const CLAIM: LeaseFields = { until: "claimedUntil", holder: "fileId" };

/** Renewed every second while its request lives: a retry waits at most about this long for a dead owner's claim. */
const CLAIM_LEASE_MS = 3_000;
/** How often a request waiting on another's claim looks again. */
const CLAIM_POLL_MS = 25;

/** A claim is an insert under the key's _id (one of two concurrent requests wins); later writes depend on its fileId. */
export class IdempotencyKeys {
  constructor(
    private readonly store: FileStore,
    private readonly ttlMs: number,
    private readonly logger: Logger,
  ) {}

  async claim(
    partnerId: string,
    mode: FileMode,
    key: string,
    fingerprint: string,
    fileId: string,
    signal?: AbortSignal,
  ): Promise<ClaimOutcome> {
    for (;;) {
      signal?.throwIfAborted();
      const now = new Date();
      const _id = keyId(partnerId, mode, key);
      const fresh: KeyDoc = {
        _id,
        partnerId,
        mode,
        key,
        fingerprint,
        fileId,
        state: "claimed",
        claimedUntil: new Date(now.getTime() + CLAIM_LEASE_MS),
        expiresAt: new Date(now.getTime() + this.ttlMs),
      };
      const stored = (await insertIfNew(this.store.keys, fresh)) ? fresh : await this.store.keys.findOne({ _id });
      if (!stored) continue;
      const decision = decide(stored, { fingerprint, fileId }, now);
      switch (decision.kind) {
        case "owned":
        case "replay":
        case "conflict":
          return decision;
        case "expired":
          await this.store.keys.deleteOne({ _id: stored._id, fileId: stored.fileId });
          continue;
        case "abandoned": {
          // The owner may have died between writing the file and committing the key.
          const written = await this.store.files.findOne({ _id: stored.fileId }, { projection: { _id: 1 } });
          if (written)
            await this.store.keys.updateOne(
              { _id: stored._id, fileId: stored.fileId, state: "claimed" },
              { $set: { state: "committed" } },
            );
          else await this.store.keys.deleteOne({ _id: stored._id, fileId: stored.fileId, state: "claimed" });
          continue;
        }
        case "wait":
          await sleep(CLAIM_POLL_MS);
          continue;
      }
    }
  }

  /** Keeps an owned claim alive while its request works; returns the stop. */
  hold(partnerId: string, mode: FileMode, key: string, fileId: string): () => void {
    const kept = keepAlive(
      "an idempotency claim",
      CLAIM_LEASE_MS / 3,
      () => this.renew(partnerId, mode, key, fileId),
      this.logger,
    );
    return () => void kept.stop();
  }

  renew(partnerId: string, mode: FileMode, key: string, fileId: string): Promise<boolean> {
    return renewLease(this.store.keys, keyId(partnerId, mode, key), CLAIM, fileId, CLAIM_LEASE_MS);
  }

  /** The file of this claim is written: later requests with the same payload replay it. */
  async commit(partnerId: string, mode: FileMode, key: string, fileId: string): Promise<void> {
    await this.store.keys.updateOne(
      { _id: keyId(partnerId, mode, key), fileId },
      { $set: { state: "committed", expiresAt: new Date(Date.now() + this.ttlMs) } },
    );
  }

  /** The request was refused after claiming: the key is free again, as if never used. */
  async release(partnerId: string, mode: FileMode, key: string, fileId: string): Promise<void> {
    await this.store.keys.deleteOne({ _id: keyId(partnerId, mode, key), fileId, state: "claimed" });
  }

  async sweep(now = new Date()): Promise<number> {
    const res = await this.store.keys.deleteMany({ expiresAt: { $lte: now } });
    return res.deletedCount;
  }
}
