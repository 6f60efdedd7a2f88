import type { FileDoc, FileStore } from "../src/store.js";
import { readBlobPart } from "../src/staging.js";

/** The plaintext of a file's whole blob, part by part as extraction reads it; a segment missing, moved, changed or cut off throws. */
export async function readBlob(
  store: FileStore,
  file: Pick<FileDoc, "blobId" | "size">,
  dataKey: Buffer | null,
): Promise<Buffer> {
  const first = await readBlobPart(store, file, dataKey, 0);
  const parts = [first.bytes];
  for (let n = 1; n < first.parts; n++) parts.push((await readBlobPart(store, file, dataKey, n)).bytes);
  return Buffer.concat(parts);
}
