import type { Binary, Db, ObjectId } from "mongodb";
import { outboxEntry, type OutboxEntry, type OutboxFields } from "@pi/common/store/persistence";
import type { ExtractionKind } from "@pi/common/rules/media-types";
import type { FailureReason } from "@pi/common/rules/extracted";
import type { JobLeaseDoc, LeaseFields } from "@pi/common/background/lease";
import type { WrappedKey } from "@pi/common/store/data-keys";
import type { PartnerMode } from "@pi/common/rules/mode";
import type { KeyRecord } from "./idempotency.js";
import type { Usage } from "./quota.js";

export type FileStatus = "received" | "processed" | "failed";
export type FileMode = PartnerMode;

/** What a file record holds about its content, only ever stored sealed (`sealedMeta`). */
export interface FileMeta {
  elder: string;
  purpose: string | null;
  sha256: string;
}

/** One accepted file. Health data is stored only sealed under its own data key (at-rest.ts). */
export interface FileDoc extends OutboxFields<OutboxEntry> {
  _id: string;
  partnerId: string;
  mode: FileMode;
  /** The file's data key, wrapped by a KEK of DATA_KEYS; null once its data was swept. */
  dataKey: WrappedKey | null;
  /** FileMeta, sealed (at-rest.ts); null once swept. */
  sealedMeta: Binary | null;
  mediaType: string;
  size: number;
  blobId: ObjectId;
  idempotencyKey: string | null;
  status: FileStatus;
  /** Extraction lease (EXTRACTION_LEASE): a worker holds the file until then (heartbeats push it forward). */
  leaseUntil: Date | null;
  leaseToken: string | null;
  attempts: number;
  /** Plain text only: its length in UTF-16 code units, so its extraction needs no read back. */
  textLength?: number | null;
  /** Test files sent with purpose `sandbox_failed` (sandbox-outcome.ts). */
  sandboxOutcome?: "failed" | null;
  failureReason?: FailureReason | null;
  createdAt: Date;
  updatedAt: Date;
  processedAt: Date | null;
  /** When the retention sweep deleted the file's data (bytes, extraction result, metadata, data key). */
  purgedAt?: Date | null;
}

/** What a new file's record starts with besides its own fields: received, no lease yet. */
const RECEIVED = {
  status: "received",
  relayUntil: null,
  relayHolder: null,
  leaseUntil: null,
  leaseToken: null,
  attempts: 0,
  processedAt: null,
  purgedAt: null,
} as const;

export type NewFile = Omit<FileDoc, keyof typeof RECEIVED | "outbox" | "createdAt" | "updatedAt">;

export function newFileDoc(file: NewFile, now: Date): FileDoc {
  return { ...file, ...RECEIVED, outbox: [outboxEntry({}, now)], createdAt: now, updatedAt: now };
}

/** What extraction found; internal. All but `kind` and `ok` is sealed under the file's data key. */
export interface ExtractionDoc {
  _id: string;
  kind: ExtractionKind;
  ok: boolean;
  sealed: Binary;
  extractedAt: Date;
}

export interface KeyDoc extends KeyRecord {
  _id: string;
  partnerId: string;
  mode: FileMode;
  key: string;
}

/** Partner ids and modes have no ":": each (partner, mode) has a key space of its own. */
export const keyId = (partnerId: string, mode: FileMode, key: string) => `${partnerId}:${mode}:${key}`;

export const EXTRACTION_LEASE: LeaseFields = { until: "leaseUntil", holder: "leaseToken" };

/** Bytes being received (staging.ts): its segments plus this document, until a FileDoc names its blob. */
export interface UploadDoc {
  _id: ObjectId;
  partnerId: string;
  startedAt: Date;
  discardedAt: Date | null;
}

export interface SegmentDoc {
  _id: string;
  data: Binary;
}

/** A partner's storage usage in one mode, `_id` `<partnerId>:<mode>`. */
export interface UsageDoc extends Usage {
  _id: string;
}

export type FileStore = Awaited<ReturnType<typeof openFileStore>>;

export interface TurnDoc {
  _id: string;
  lastTakenAt: Date;
}

export const BLOB_SEGMENTS = "blob_segments";
/** Plaintext per stored segment: one document (of BLOB_SEGMENT_BYTES + SEAL_OVERHEAD) each. */
export const BLOB_SEGMENT_BYTES = 1024 * 1024;
/** A segment's id: every read and delete is by `_id` equality, which both servers answer from the index. */
export const segmentId = (blobId: ObjectId, n: number) => `${blobId.toHexString()}:${n}`;
export const segmentCount = (size: number) => Math.floor(size / BLOB_SEGMENT_BYTES) + 1;

export async function openFileStore(db: Db) {
  const store = {
    db,
    files: db.collection<FileDoc>("files"),
    extractions: db.collection<ExtractionDoc>("extractions"),
    keys: db.collection<KeyDoc>("idempotency_keys"),
    uploads: db.collection<UploadDoc>("uploads"),
    leases: db.collection<JobLeaseDoc>("job_leases"),
    segments: db.collection<SegmentDoc>(BLOB_SEGMENTS),
    usage: db.collection<UsageDoc>("storage_usage"),
    turns: db.collection<TurnDoc>("extraction_turns"),
  };
  // Expiry and recovery are explicit sweeps (the same code runs on MongoDB and the local server).
  await Promise.all([
    store.keys.createIndex({ expiresAt: 1 }),
    store.files.createIndex({ status: 1, createdAt: 1 }),
    store.files.createIndex({ blobId: 1 }),
    // The retention sweep (retention.ts): files of a mode not swept yet, oldest first.
    store.files.createIndex({ mode: 1, purgedAt: 1, createdAt: 1 }),
    store.uploads.createIndex({ startedAt: 1 }),
  ]);
  return store;
}
