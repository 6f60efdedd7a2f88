import { acceptedType } from "@pi/common/rules/media-types";
import { endLease, leaseFree, renewLease, takeLease } from "@pi/common/background/lease";
import type { Extracted, FailureReason } from "@pi/common/rules/extracted";
import type { KeyWrapper } from "@pi/common/store/data-keys";
import type { Logger } from "@pi/common/runtime/logger";
import { fileDataKey, sealExtraction } from "./at-rest.js";
import { readBlobPart } from "./staging.js";
import { testFileOutcome } from "./sandbox-outcome.js";
import { nextTurn, type WaitingHead } from "./extraction-turns.js";
import { EXTRACTION_LEASE, type FileDoc, type FileStatus, type FileStore } from "./store.js";

// file-intake's side of extraction. A take is a lease on the file's record that counts an attempt,
// so no two workers process one file at once, and a file whose extractor keeps dying ends `failed`.

/** How often takeNext looks again after losing its file to another taker. */
const TAKE_NEXT_TRIES = 5;

export type Take =
  | { taken: true; holder: string; mediaType: string; size: number; attempt: number }
  | { taken: false; status: FileStatus | "unknown" };

export class ExtractionRecords {
  constructor(
    private readonly store: FileStore,
    private readonly dataKeys: KeyWrapper,
    private readonly logger: Logger,
  ) {}

  async take(fileId: string, leaseMs: number, maxAttempts: number): Promise<Take> {
    const lease = await takeLease(this.store.files, { _id: fileId, status: "received" }, EXTRACTION_LEASE, {
      ms: leaseMs,
      update: { $set: { updatedAt: new Date() }, $inc: { attempts: 1 } },
    });
    if (!lease) {
      const doc = await this.store.files.findOne({ _id: fileId }, { projection: { status: 1 } });
      return { taken: false, status: doc?.status ?? "unknown" };
    }
    const { doc, holder } = lease;
    // Test files run no extraction: processed, or the failure their purpose asked for.
    if (doc.mode === "test") return this.endTake(doc, holder, testFileOutcome(doc));
    // Plain text was checked and measured as it was received (intake.ts): nothing to read back.
    if (typeof doc.textLength === "number")
      return this.endTake(doc, holder, { ok: true, kind: "plain-text", textLength: doc.textLength });
    if (doc.attempts > maxAttempts) {
      const kind = acceptedType(doc.mediaType)?.extraction ?? "plain-text";
      return this.endTake(doc, holder, {
        ok: false,
        kind,
        reason: "extractor_died",
        error: `the extractor died on the file ${maxAttempts} times`,
      });
    }
    return { taken: true, holder, mediaType: doc.mediaType, size: doc.size, attempt: doc.attempts };
  }

  /** The next file, fairly (extraction-turns.ts); the turn is marked first, so a concurrent taker moves on. */
  async takeNext(leaseMs: number, maxAttempts: number): Promise<{ fileId: string; take: Take } | null> {
    for (let tries = 0; tries < TAKE_NEXT_TRIES; tries++) {
      const now = new Date();
      const heads = await this.store.files
        .aggregate<WaitingHead>([
          { $match: { status: "received", ...leaseFree(EXTRACTION_LEASE, now) } },
          { $sort: { createdAt: 1 } },
          { $group: { _id: "$partnerId", fileId: { $first: "$_id" }, oldest: { $first: "$createdAt" } } },
          { $project: { _id: 0, partnerId: "$_id", fileId: 1, oldest: 1 } },
        ])
        .toArray();
      if (heads.length === 0) return null;
      const turns = await this.store.turns.find({ _id: { $in: heads.map((h) => h.partnerId) } }).toArray();
      const next = nextTurn(heads, new Map(turns.map((t) => [t._id, t.lastTakenAt])))!;
      await this.store.turns.updateOne({ _id: next.partnerId }, { $set: { lastTakenAt: now } }, { upsert: true });
      const take = await this.take(next.fileId, leaseMs, maxAttempts);
      if (take.taken || take.status !== "received") return { fileId: next.fileId, take };
    }
    return null;
  }

  private async endTake(doc: FileDoc, holder: string, outcome: Extracted | null): Promise<Take> {
    const recorded = await this.record(doc._id, holder, outcome);
    return { taken: false, status: recorded ?? "received" };
  }

  /** Part `n` of a file's bytes for the holder of its lease; null when the lease is not the holder's. */
  async read(fileId: string, holder: string, n: number): Promise<{ bytes: Buffer; parts: number } | null> {
    const doc = await this.store.files.findOne({ _id: fileId, [EXTRACTION_LEASE.holder]: holder });
    if (!doc) return null;
    return readBlobPart(this.store, doc, await fileDataKey(this.dataKeys, doc), n);
  }

  renew(fileId: string, holder: string, leaseMs: number): Promise<boolean> {
    return renewLease(this.store.files, fileId, EXTRACTION_LEASE, holder, leaseMs);
  }

  /** Stores the outcome sealed and ends the file in the write that ends the lease; null when the lease was lost. */
  async record(fileId: string, holder: string, outcome: Extracted | null): Promise<FileStatus | null> {
    const doc = await this.store.files.findOne({ _id: fileId, [EXTRACTION_LEASE.holder]: holder });
    if (!doc) return null;
    if (outcome) {
      const key = await fileDataKey(this.dataKeys, doc);
      await this.store.extractions.replaceOne({ _id: fileId }, sealExtraction(key, fileId, outcome, new Date()), {
        upsert: true,
      });
    }
    const status: FileStatus = outcome && !outcome.ok ? "failed" : "processed";
    const failureReason: FailureReason | null = outcome && !outcome.ok ? outcome.reason : null;
    const done = new Date();
    const ended = await endLease(this.store.files, fileId, EXTRACTION_LEASE, holder, {
      filter: { status: "received" },
      update: { $set: { status, failureReason, processedAt: done, updatedAt: done } },
    });
    if (!ended) return null;
    // Codes only: never the file's content, elder or purpose (health data).
    this.logger.info(
      {
        fileId,
        status,
        ...(failureReason ? { reason: failureReason } : {}),
        mode: doc.mode,
        mediaType: doc.mediaType,
        attempt: doc.attempts,
      },
      "file processed",
    );
    return status;
  }

  /** Files left `received` for longer than `receivedBeforeMs` whose lease is free. */
  async awaiting(receivedBeforeMs: number, limit: number, now = new Date()): Promise<string[]> {
    const stuck = await this.store.files
      .find(
        {
          status: "received",
          createdAt: { $lte: new Date(now.getTime() - receivedBeforeMs) },
          ...leaseFree(EXTRACTION_LEASE, now),
        },
        { projection: { _id: 1 } },
      )
      .limit(Math.min(Math.max(limit, 1), 500))
      .toArray();
    return stuck.map((f) => f._id);
  }
}
