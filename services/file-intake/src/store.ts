import type { Binary, Collection, Db, ObjectId } from "mongodb";
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
  /** Lowercase hex SHA-256 of the plaintext bytes. */
  sha256: string;
}

/**
 * One accepted file. Written once every check has passed, before the 202 is answered. Health data
 * (its bytes, its extraction result, elder, purpose, SHA-256) is stored only encrypted under the
 * file's own data key (at-rest.ts); the retention sweep deletes it and keeps the rest (the status).
 */
export interface FileDoc extends OutboxFields<OutboxEntry> {
  _id: string;
  partnerId: string;
  mode: FileMode;
  /** The file's data key, wrapped by a KEK of DATA_KEYS; null once its data was swept. */
  dataKey: WrappedKey | null;
  /** FileMeta, sealed under the data key (at-rest.ts); null once swept. */
  sealedMeta: Binary | null;
  mediaType: string;
  size: number;
  /** The id of the bytes, its segments in `blob_segments` (deleted by the retention sweep; the id stays). */
  blobId: ObjectId;
  idempotencyKey: string | null;
  status: FileStatus;
  /** Extraction lease (EXTRACTION_LEASE): a worker holds the file until then (heartbeats push it forward). */
  leaseUntil: Date | null;
  leaseToken: string | null;
  /** How many times an extraction worker took the file (extraction-records.ts). */
  attempts: number;
  /**
   * Plain text only: its length in UTF-16 code units, measured as the bytes were received
   * (TextChecker); its extraction is then recorded without reading the bytes back
   * (extraction-records.ts). null for every other type.
   */
  textLength?: number | null;
  /**
   * Test files only: "failed" when it was sent with purpose `sandbox_failed` (sandbox-outcome.ts), so
   * it ends failed; absent on every other file.
   */
  sandboxOutcome?: "failed" | null;
  /** Why the file ended `failed` (a code of FAILURE_REASONS; no content); null or absent otherwise. */
  failureReason?: FailureReason | null;
  createdAt: Date;
  updatedAt: Date;
  processedAt: Date | null;
  /** When the retention sweep deleted the file's data (bytes, extraction result, metadata, data key). */
  purgedAt?: Date | null;
}

/** What intake decides about a new file; the rest of its record is the same for every new file. */
export type NewFile = Pick<
  FileDoc,
  | "_id"
  | "partnerId"
  | "mode"
  | "dataKey"
  | "sealedMeta"
  | "mediaType"
  | "size"
  | "blobId"
  | "idempotencyKey"
  | "textLength"
  | "sandboxOutcome"
>;

/** A new file's record as intake stores it: received, its FileReceivedEvent in the outbox (outbox.ts), no lease yet. */
export function newFileDoc(file: NewFile, now: Date): FileDoc {
  return {
    ...file,
    status: "received",
    outbox: [outboxEntry({}, now)],
    relayUntil: null,
    relayHolder: null,
    leaseUntil: null,
    leaseToken: null,
    attempts: 0,
    createdAt: now,
    updatedAt: now,
    processedAt: null,
    purgedAt: null,
  };
}

/**
 * What extraction found; internal, never exposed through any API. Only `kind` and `ok` are stored
 * in the clear; the rest (text, sizes, error) is `sealed` under the file's data key (at-rest.ts).
 */
export interface ExtractionDoc {
  _id: string;
  kind: ExtractionKind;
  ok: boolean;
  sealed: Binary;
  extractedAt: Date;
}

/** An Idempotency-Key, read and written by its deterministic _id (keyId). */
export interface KeyDoc extends KeyRecord {
  _id: string;
  partnerId: string;
  mode: FileMode;
  key: string;
}

/**
 * Partner ids and modes have no ":", so the id names one (partner, mode, key): a partner's test and
 * live credentials have key spaces of their own (docs/files.md, "Idempotency").
 */
export const keyId = (partnerId: string, mode: FileMode, key: string) => `${partnerId}:${mode}:${key}`;

export const EXTRACTION_LEASE: LeaseFields = { until: "leaseUntil", holder: "leaseToken" };

/**
 * Bytes being received and not yet committed (or discarded): the staging area. A staged upload is
 * only its segments plus this document; it becomes a file when a FileDoc names its blob.
 */
export interface UploadDoc {
  _id: ObjectId;
  partnerId: string;
  startedAt: Date;
  discardedAt: Date | null;
}

/** One sealed segment of a blob (staging.ts), under the deterministic id `segmentId(blobId, n)`. */
export interface SegmentDoc {
  _id: string;
  data: Binary;
}

/** A partner's storage usage in one mode (quota.ts, usage.ts), by its deterministic `_id` `<partnerId>:<mode>`. */
export interface UsageDoc extends Usage {
  _id: string;
}

export interface FileStore {
  db: Db;
  files: Collection<FileDoc>;
  extractions: Collection<ExtractionDoc>;
  keys: Collection<KeyDoc>;
  uploads: Collection<UploadDoc>;
  /** Leases of periodic jobs that one replica at a time runs (the retention sweep). */
  leases: Collection<JobLeaseDoc>;
  /** The bytes of files: one document per sealed segment, found by `_id` alone. */
  segments: Collection<SegmentDoc>;
  /** The storage quota's counters, read and written by `_id` alone. */
  usage: Collection<UsageDoc>;
  /** When each partner's last file was taken for extraction (extraction-turns.ts), by `_id` (the partner id). */
  turns: Collection<TurnDoc>;
}

/** A partner's extraction turn: one per partner whose file was ever taken. */
export interface TurnDoc {
  _id: string;
  lastTakenAt: Date;
}

/** The collection of sealed segments. */
export const BLOB_SEGMENTS = "blob_segments";
/** Plaintext per stored segment: one document (of BLOB_SEGMENT_BYTES + SEAL_OVERHEAD) each. */
export const BLOB_SEGMENT_BYTES = 1024 * 1024;
/**
 * A segment's id: the blob's and its place. Reads, deletes and a stored segment's place are all by
 * `_id` equality, which both servers answer from the `_id` index.
 */
export const segmentId = (blobId: ObjectId, n: number) => `${blobId.toHexString()}:${n}`;
/** How many segments a blob of `size` plaintext bytes has: the full ones and the final one (empty when `size` is a multiple). */
export const segmentCount = (size: number) => Math.floor(size / BLOB_SEGMENT_BYTES) + 1;

export async function openFileStore(db: Db): Promise<FileStore> {
  const store: FileStore = {
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
