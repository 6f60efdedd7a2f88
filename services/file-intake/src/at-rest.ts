import { Binary } from "mongodb";
import { encrypt, type KeyWrapper } from "@pi/common/store/data-keys";
import type { Extracted } from "@pi/common/rules/extracted";
import type { ExtractionDoc, FileDoc, FileMeta } from "./store.js";

// Sealed under the file's own data key (docs/security.md), each box bound to its file and kind.

export const metaAad = (fileId: string) => `pi-file-meta.v1|${fileId}`;
export const extractionAad = (fileId: string) => `pi-extraction.v1|${fileId}`;

export function sealMeta(key: Buffer, fileId: string, meta: FileMeta): Binary {
  return new Binary(encrypt(key, Buffer.from(JSON.stringify(meta)), metaAad(fileId)));
}

/** The data key of a file record; throws once the retention sweep deleted it. */
export async function fileDataKey(wrapper: KeyWrapper, doc: Pick<FileDoc, "_id" | "dataKey">): Promise<Buffer> {
  if (doc.dataKey === null) throw new Error(`the data of ${doc._id} was deleted by the retention sweep`);
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
