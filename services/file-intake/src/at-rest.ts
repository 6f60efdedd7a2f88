import { Binary } from "mongodb";
import { decrypt, encrypt, newDataKey, type Extracted, type KeyWrapper, type WrappedKey } from "@pi/common";
import type { ExtractionDoc, FileDoc, FileMeta, FileStore } from "./store.js";

// What file-intake stores about a file's content, encrypted under the file's own data key
// (services/common/src/data-keys.ts; docs/security.md, "Data at rest"): the bytes (staging.ts, per
// chunk), the metadata (elder, purpose, SHA-256) and the extraction result. Each box is bound to its
// file and its kind, so none can stand in for another's. The data key is stored only wrapped.

const metaAad = (fileId: string) => `pi-file-meta.v1|${fileId}`;
const extractionAad = (fileId: string) => `pi-extraction.v1|${fileId}`;

export function sealMeta(key: Buffer, fileId: string, meta: FileMeta): Binary {
  return new Binary(encrypt(key, Buffer.from(JSON.stringify(meta)), metaAad(fileId)));
}

export function openMeta(key: Buffer, fileId: string, sealed: Binary): FileMeta {
  return JSON.parse(decrypt(key, sealed.buffer, metaAad(fileId)).toString("utf8")) as FileMeta;
}

/** Thrown when a file's data was deleted by the retention sweep. */
export class FileDataSwept extends Error {}

/** The data key of a file record; null for a record from before encryption at rest (its data is plaintext). */
export async function fileDataKey(wrapper: KeyWrapper, doc: Pick<FileDoc, "_id" | "dataKey">): Promise<Buffer | null> {
  if (doc.dataKey === undefined) return null;
  if (doc.dataKey === null) throw new FileDataSwept(`the data of ${doc._id} was deleted by the retention sweep`);
  return wrapper.unwrap(doc.dataKey);
}

/**
 * The data key of a record from before encryption at rest, given one on first need (its extraction
 * result is then stored sealed): one conditional write, so of two workers both use the winner's.
 */
export async function ensureDataKey(store: FileStore, wrapper: KeyWrapper, doc: Pick<FileDoc, "_id" | "dataKey">): Promise<Buffer> {
  if (doc.dataKey) return wrapper.unwrap(doc.dataKey);
  const fresh = await newDataKey(wrapper);
  await store.files.updateOne({ _id: doc._id, dataKey: { $exists: false } }, { $set: { dataKey: fresh.wrapped } });
  const now = await store.files.findOne({ _id: doc._id }, { projection: { dataKey: 1 } });
  const stored: WrappedKey | null | undefined = now?.dataKey;
  if (!stored) throw new FileDataSwept(`the data of ${doc._id} was deleted by the retention sweep`);
  return wrapper.unwrap(stored);
}

/** The record of an extraction result: `kind` and `ok` in the clear, everything else sealed. */
export function sealExtraction(key: Buffer, fileId: string, outcome: Extracted, extractedAt: Date): ExtractionDoc {
  const { kind, ok, ...rest } = outcome;
  return { _id: fileId, kind, ok, sealed: new Binary(encrypt(key, Buffer.from(JSON.stringify(rest)), extractionAad(fileId))), extractedAt };
}

export type StoredExtraction = Extracted & { extractedAt: Date };

/** An extraction record as found (a record from before encryption at rest is plaintext). */
export function openExtraction(key: Buffer | null, doc: ExtractionDoc): StoredExtraction {
  const { _id, sealed, ...clear } = doc;
  if (!sealed) return clear as StoredExtraction;
  if (!key) throw new Error(`extraction ${_id} is sealed, and no data key was given`);
  const rest = JSON.parse(decrypt(key, sealed.buffer, extractionAad(_id)).toString("utf8")) as object;
  return { ...clear, ...rest } as StoredExtraction;
}

/** A file's extraction result, opened; null when there is none (a test file, not processed yet, swept). */
export async function readExtraction(store: FileStore, wrapper: KeyWrapper, fileId: string): Promise<StoredExtraction | null> {
  const [file, doc] = await Promise.all([store.files.findOne({ _id: fileId }, { projection: { dataKey: 1 } }), store.extractions.findOne({ _id: fileId })]);
  if (!file || !doc) return null;
  return openExtraction(await fileDataKey(wrapper, file), doc);
}

/** A file's metadata, opened; null when the file is unknown or its data was swept. */
export async function readMeta(store: FileStore, wrapper: KeyWrapper, fileId: string): Promise<FileMeta | null> {
  const file = await store.files.findOne({ _id: fileId });
  if (!file || file.dataKey === null) return null;
  if (!file.sealedMeta) return file.elder === undefined ? null : { elder: file.elder, purpose: file.purpose ?? null, sha256: file.sha256 ?? "" };
  return openMeta((await fileDataKey(wrapper, file))!, fileId, file.sealedMeta);
}
