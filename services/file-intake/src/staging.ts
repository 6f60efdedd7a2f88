import { ObjectId, type GridFSBucketWriteStream } from "mongodb";
import { BLOB_BUCKET, BLOB_CHUNK_BYTES, type FileStore } from "./store.js";

/**
 * Bytes on their way in. They go to GridFS as they arrive (never held whole in memory) under an
 * upload document; they become a file only when a FileDoc names them, and until then nothing reads
 * them. A refused upload is discarded before the answer; one whose process died is swept.
 */
export class StagedUpload {
  private readonly stream: GridFSBucketWriteStream;
  private ended = false;
  private discarded = false;
  // Bytes are gathered into whole GridFS chunks, and one chunk is inserted while the next is being
  // received: the upload and the database writes overlap, and at most two chunks are in memory.
  private batch: Uint8Array[] = [];
  private batchBytes = 0;
  private inFlight: Promise<void> = Promise.resolve();

  /** The upload document; no chunk is written before it is stored, so the sweep can find every byte. */
  private readonly recorded: Promise<unknown>;

  private constructor(
    private readonly store: FileStore,
    readonly id: ObjectId,
    partnerId: string,
  ) {
    this.recorded = store.uploads.insertOne({ _id: id, partnerId, startedAt: new Date(), discardedAt: null });
    this.recorded.catch(() => {});
    this.stream = store.blobs.openUploadStreamWithId(id, id.toHexString());
  }

  /** Starts an upload; its document is written while the first chunk is being received. */
  static open(store: FileStore, partnerId: string): StagedUpload {
    return new StagedUpload(store, new ObjectId(), partnerId);
  }

  /** Takes a chunk; waits only when a full GridFS chunk is ready and the previous one is still being stored. */
  async write(chunk: Uint8Array): Promise<void> {
    this.batch.push(chunk);
    this.batchBytes += chunk.length;
    if (this.batchBytes >= BLOB_CHUNK_BYTES) await this.flush();
  }

  private async flush(): Promise<void> {
    if (this.batchBytes === 0) return;
    const data = Buffer.concat(this.batch, this.batchBytes);
    this.batch = [];
    this.batchBytes = 0;
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

  /** Stores the rest and the GridFS file document. */
  async finish(): Promise<void> {
    await this.recorded;
    await this.flush();
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

/**
 * The bytes of a stored blob, read chunk by chunk by (files_id, n): lookups the unique chunk index
 * answers on every server. (The driver's download stream asks for `{files_id}` sorted by n, which
 * the local server answers by scanning every chunk of every file.)
 */
export async function readBlob(store: FileStore, id: ObjectId): Promise<Buffer> {
  const file = await store.db.collection<{ _id: ObjectId; length: number; chunkSize: number }>(`${BLOB_BUCKET}.files`).findOne({ _id: id });
  if (!file) throw new Error(`blob ${id.toHexString()} not found`);
  const chunks = store.db.collection<{ files_id: ObjectId; n: number; data: { buffer: Uint8Array } }>(`${BLOB_BUCKET}.chunks`);
  const out = Buffer.allocUnsafe(file.length);
  let at = 0;
  for (let n = 0; at < file.length; n++) {
    const chunk = await chunks.findOne(chunkFilter(id, n));
    if (!chunk) throw new Error(`blob ${id.toHexString()}: chunk ${n} missing`);
    const data = chunk.data.buffer;
    if (data.length === 0 || at + data.length > file.length) throw new Error(`blob ${id.toHexString()}: chunk ${n} has the wrong size`);
    out.set(data, at);
    at += data.length;
  }
  return out;
}
