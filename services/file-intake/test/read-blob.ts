import type { Binary } from "mongodb";
import { decrypt, type KeyWrapper } from "@pi/common/store/data-keys";
import type { Extracted } from "@pi/common/rules/extracted";
import { extractionAad, fileDataKey, metaAad } from "../src/at-rest.js";
import type { ExtractionDoc, FileDoc, FileMeta, FileStore } from "../src/store.js";
import { readBlobPart } from "../src/staging.js";

// What the service stores sealed and never reads back itself, opened the way only a test may.

/** The plaintext of a file's whole blob, part by part as extraction reads it; a segment missing, moved, changed or cut off throws. */
export async function readBlob(
  store: FileStore,
  file: Pick<FileDoc, "blobId" | "size">,
  dataKey: Buffer,
): Promise<Buffer> {
  const first = await readBlobPart(store, file, dataKey, 0);
  const parts = [first.bytes];
  for (let n = 1; n < first.parts; n++) parts.push((await readBlobPart(store, file, dataKey, n)).bytes);
  return Buffer.concat(parts);
}

function openMeta(key: Buffer, fileId: string, sealed: Binary): FileMeta {
  return JSON.parse(decrypt(key, sealed.buffer, metaAad(fileId)).toString("utf8")) as FileMeta;
}

export type StoredExtraction = Extracted & { extractedAt: Date };

function openExtraction(key: Buffer, doc: ExtractionDoc): StoredExtraction {
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
