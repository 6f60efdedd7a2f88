import { ObjectId, type GridFSBucketWriteStream } from "mongodb";
import { openSegment, SEAL_OVERHEAD, sealSegment } from "@pi/common";
import { BLOB_BUCKET, BLOB_CHUNK_BYTES, BLOB_SEGMENT_BYTES, type FileStore } from "./store.js";

/**
 * Bytes on their way in. They go to GridFS as they arrive (never held whole in memory) under an
 * upload document; they become a file only when a FileDoc names them, and until then nothing reads
 * them. A refused upload is discarded before the answer; one whose process died is swept.
 *
 * Encrypted at rest: every BLOB_SEGMENT_BYTES of plaintext is sealed on its own (AES-256-GCM under
 * the file's data key, a nonce each, bound to the blob and its place, the last one marked final:
 * data-keys.ts) into exactly one GridFS chunk of BLOB_CHUNK_BYTES. The last chunk is the final
 * segment, shorter, empty when the size is a multiple of the segment.
 */
export class StagedUpload {
  private readonly stream: GridFSBucketWriteStream;
  private ended = false;
  private discarded = false;
  // Bytes are gathered into whole segments, and one chunk is inserted while the next is being
  // received: the upload and the database writes overlap, and at most two segments are in memory.
  private batch: Uint8Array[] = [];
  private batchBytes = 0;
  private segments = 0;
  private inFlight: Promise<void> = Promise.resolve();

  /** The upload document; no chunk is written before it is stored, so the sweep can find every byte. */
  private readonly recorded: Promise<unknown>;

  private constructor(
    private readonly store: FileStore,
    readonly id: ObjectId,
    partnerId: string,
    private readonly dataKey: Buffer,
  ) {
    this.recorded = store.uploads.insertOne({ _id: id, partnerId, startedAt: new Date(), discardedAt: null });
    this.recorded.catch(() => {});
    this.stream = store.blobs.openUploadStreamWithId(id, id.toHexString(), { chunkSizeBytes: BLOB_CHUNK_BYTES, metadata: { sealed: BLOB_SEALING } });
  }

  /** Starts an upload encrypted under `dataKey`; its document is written while the first chunk is being received. */
  static open(store: FileStore, partnerId: string, dataKey: Buffer): StagedUpload {
    return new StagedUpload(store, new ObjectId(), partnerId, dataKey);
  }

  /** Takes a chunk; waits only when a whole segment is ready and the previous one is still being stored. */
  async write(chunk: Uint8Array): Promise<void> {
    this.batch.push(chunk);
    this.batchBytes += chunk.length;
    while (this.batchBytes >= BLOB_SEGMENT_BYTES) await this.flush(false);
  }

  /** Seals and stores the next segment: BLOB_SEGMENT_BYTES of the batch, or (final) what is left. */
  private async flush(final: boolean): Promise<void> {
    const all = Buffer.concat(this.batch, this.batchBytes);
    const take = final ? all.length : BLOB_SEGMENT_BYTES;
    const rest = all.subarray(take);
    this.batch = rest.length > 0 ? [rest] : [];
    this.batchBytes = rest.length;
    const data = sealSegment(this.dataKey, this.id.toHexString(), this.segments++, final, all.subarray(0, take));
    await this.recorded;
    await this.inFlight;
    // A discard that began while this flush waited wins: no chunk may land after its delete.
    if (this.discarded) return;
    this.inFlight = new Promise((resolve, reject) => {
      // The callback of a write that completes a GridFS chunk comes after that chunk's insert.
      this.stream.write(data, (err) => (err ? reject(err) : resolve()));
    });
    this.inFlight.catch(() => {});
  }

  /** Stores the rest (the final segment) and the GridFS file document. */
  async finish(): Promise<void> {
    await this.recorded;
    await this.flush(true);
    await this.inFlight;
    this.ended = true;
    await new Promise<void>((resolve, reject) => {
      this.stream.once("error", reject);
      this.stream.end(() => resolve());
    });
  }

  /** The bytes are now a file's: the upload document goes, the bytes stay. */
  async committed(): Promise<void> {
    await this.store.uploads.deleteOne({ _id: this.id });
  }

  /**
   * Deletes the bytes, once the insert in flight (if any) has landed; the upload document stays,
   * marked, until the staging sweep has checked once more that nothing is left.
   */
  async discard(): Promise<void> {
    this.discarded = true;
    await this.recorded.catch(() => {});
    // A flush that was already past its wait may have started one more insert: wait for the
    // latest one, however many were started while we waited.
    for (let seen = this.inFlight; ; seen = this.inFlight) {
      await seen.catch(() => {});
      if (seen === this.inFlight) break;
    }
    if (!this.ended) this.stream.destroy();
    await this.store.uploads.updateOne({ _id: this.id }, { $set: { discardedAt: new Date() } });
    await deleteBlob(this.store, this.id);
  }
}

export async function deleteBlob(store: FileStore, id: ObjectId): Promise<void> {
  await store.db.collection(`${BLOB_BUCKET}.chunks`).deleteMany({ files_id: id });
  await store.db.collection(`${BLOB_BUCKET}.files`).deleteOne({ _id: id });
}

/**
 * Removes what uploads left behind: discarded ones once `discardedGraceMs` has passed (a second
 * delete, in case a write landed late), and ones still open after `abandonedAfterMs` (their process
 * died mid-upload; a live upload cannot last that long, the gateway's deadline is shorter). Bytes a
 * file names are never deleted.
 */
export async function sweepStaging(store: FileStore, now: Date, opts: { discardedGraceMs: number; abandonedAfterMs: number }): Promise<number> {
  const due = await store.uploads
    .find({
      $or: [
        { discardedAt: { $ne: null, $lte: new Date(now.getTime() - opts.discardedGraceMs) } },
        { startedAt: { $lte: new Date(now.getTime() - opts.abandonedAfterMs) } },
      ],
    })
    .limit(500)
    .toArray();
  for (const upload of due) {
    const owner = await store.files.findOne({ blobId: upload._id }, { projection: { _id: 1 } });
    if (!owner) await deleteBlob(store, upload._id);
    await store.uploads.deleteOne({ _id: upload._id });
  }
  return due.length;
}

/** The read of one stored chunk: an equality on both keys of the unique (files_id, n) index. */
export const chunkFilter = (id: ObjectId, n: number) => ({ files_id: id, n });

/** How the chunks of a blob are sealed (its GridFS metadata); blobs without it are plaintext, from before. */
export const BLOB_SEALING = "aes-256-gcm-segments.v1";

/**
 * The plaintext bytes of a stored blob, read chunk by chunk by (files_id, n): lookups the unique
 * chunk index answers on every server. (The driver's download stream asks for `{files_id}` sorted
 * by n, which the local server answers by scanning every chunk of every file.) Each chunk is opened
 * with the file's data key as it is read; a chunk missing, moved, changed or cut off throws.
 * A blob stored before encryption at rest (no `sealed` in its metadata) is read as it is.
 */
export async function readBlob(store: FileStore, id: ObjectId, dataKey: Buffer | null): Promise<Buffer> {
  const file = await store.db
    .collection<{ _id: ObjectId; length: number; chunkSize: number; metadata?: { sealed?: string } }>(`${BLOB_BUCKET}.files`)
    .findOne({ _id: id });
  if (!file) throw new Error(`blob ${id.toHexString()} not found`);
  const sealed = file.metadata?.sealed === BLOB_SEALING;
  if (sealed && !dataKey) throw new Error(`blob ${id.toHexString()} is sealed, and no data key was given`);
  const chunks = store.db.collection<{ files_id: ObjectId; n: number; data: { buffer: Uint8Array } }>(`${BLOB_BUCKET}.chunks`);
  const count = Math.ceil(file.length / file.chunkSize);
  // One buffer of the plaintext's size; each chunk is opened and copied in, then dropped.
  const out = Buffer.allocUnsafe(file.length - (sealed ? count * SEAL_OVERHEAD : 0));
  let plain = 0;
  for (let n = 0, at = 0; at < file.length; n++) {
    const chunk = await chunks.findOne(chunkFilter(id, n));
    if (!chunk) throw new Error(`blob ${id.toHexString()}: chunk ${n} missing`);
    const data = chunk.data.buffer;
    if (data.length === 0 || at + data.length > file.length) throw new Error(`blob ${id.toHexString()}: chunk ${n} has the wrong size`);
    at += data.length;
    const bytes = sealed ? openSegment(dataKey!, id.toHexString(), n, n === count - 1, data) : data;
    if (plain + bytes.length > out.length) throw new Error(`blob ${id.toHexString()}: chunk ${n} has the wrong size`);
    out.set(bytes, plain);
    plain += bytes.length;
  }
  if (plain !== out.length) throw new Error(`blob ${id.toHexString()}: its chunks do not add up to its length`);
  return out;
}
