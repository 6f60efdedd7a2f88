import { Binary } from "mongodb";
import { decrypt, encrypt, type KeyWrapper } from "@pi/common/store/data-keys";
import type { Extracted } from "@pi/common/rules/extracted";
import type { ExtractionDoc, FileDoc, FileMeta, FileStore } from "./store.js";

// A file's metadata and extraction result, sealed under the file's own data key (docs/security.md,
// "Data at rest"); each box is bound to its file and its kind, so none can stand in for another's.

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

/** The data key of a file record; FileDataSwept once the retention sweep deleted it. */
export async function fileDataKey(wrapper: KeyWrapper, doc: Pick<FileDoc, "_id" | "dataKey">): Promise<Buffer> {
  if (doc.dataKey === null) throw new FileDataSwept(`the data of ${doc._id} was deleted by the retention sweep`);
  return wrapper.unwrap(doc.dataKey);
}

/** The record of an extraction result: `kind` and `ok` in the clear, everything else sealed. */
export function sealExtraction(key: Buffer, fileId: string, outcome: Extracted, extractedAt: Date): ExtractionDoc {
  const { kind, ok, ...rest } = outcome;
  return {
    _id: fileId,
    kind,
    ok,
    sealed: new Binary(encrypt(key, Buffer.from(JSON.stringify(rest)), extractionAad(fileId))),
    extractedAt,
  };
}

export type StoredExtraction = Extracted & { extractedAt: Date };

export function openExtraction(key: Buffer, doc: ExtractionDoc): StoredExtraction {
  const { _id, sealed, ...clear } = doc;
  const rest = JSON.parse(decrypt(key, sealed.buffer, extractionAad(_id)).toString("utf8")) as object;
  return { ...clear, ...rest } as StoredExtraction;
}

/** A file's extraction result, opened; null when there is none (a test file, not processed yet, swept). */
export async function readExtraction(
  store: FileStore,
  wrapper: KeyWrapper,
  fileId: string,
): Promise<StoredExtraction | null> {
  const [file, doc] = await Promise.all([
    store.files.findOne({ _id: fileId }, { projection: { dataKey: 1 } }),
    store.extractions.findOne({ _id: fileId }),
  ]);
  if (!file || !doc) return null;
  return openExtraction(await fileDataKey(wrapper, file), doc);
}

/** A file's metadata, opened; null when the file is unknown or its data was swept. */
export async function readMeta(store: FileStore, wrapper: KeyWrapper, fileId: string): Promise<FileMeta | null> {
  const file = await store.files.findOne({ _id: fileId });
  if (!file || file.dataKey === null || file.sealedMeta === null) return null;
  return openMeta(await fileDataKey(wrapper, file), fileId, file.sealedMeta);
}
