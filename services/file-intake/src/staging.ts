import { Binary, ObjectId } from "mongodb";
import { openSegment, SEAL_OVERHEAD, sealSegment } from "@pi/common";
import { BLOB_BUCKET, BLOB_SEGMENT_BYTES, BLOB_SEGMENTS, segmentCount, segmentId, type FileDoc, type FileStore, type UploadDoc } from "./store.js";

/**
 * Inserts of one upload under way at once: the upload, the sealing and the database writes overlap,
 * and an upload holds at most this many sealed segments (with the driver's copy of each) besides
 * the one it is receiving, whatever its size.
 */
export const SEGMENT_INSERTS_IN_FLIGHT = 2;

/**
 * Bytes on their way in. They are stored as they arrive (never held whole in memory) under an
 * upload document; they become a file only when a FileDoc names them, and until then nothing reads
 * them. A refused upload is discarded before the answer; one whose process died is swept.
 *
 * Encrypted at rest: every BLOB_SEGMENT_BYTES of plaintext is sealed on its own (AES-256-GCM under
 * the file's data key, a nonce each, bound to the blob and its place, the last one marked final:
 * data-keys.ts) into one document of `blob_segments` under `segmentId(blob, n)`. The last segment is
 * the final one, shorter, empty when the size is a multiple of the segment; a blob's size (the
 * file's) gives the number of segments, so no other document describes it.
 */
export class StagedUpload {
  private discarded = false;
  // The chunks of the segment being received (views of the chunks as they came, never joined).
  private parts: Uint8Array[] = [];
  private partsBytes = 0;
  private segments = 0;
  private readonly inFlight = new Set<Promise<void>>();
  private failure: { err: unknown } | undefined;

  /** The upload document; no segment is written before it is stored, so the sweep can find every byte. */
  private readonly recorded: Promise<unknown>;

  private constructor(
    private readonly store: FileStore,
    readonly id: ObjectId,
    partnerId: string,
    private readonly dataKey: Buffer,
  ) {
    const doc: UploadDoc = { _id: id, partnerId, startedAt: new Date(), discardedAt: null, blobStore: BLOB_SEGMENTS };
    this.recorded = store.uploads.insertOne(doc);
    this.recorded.catch(() => {});
  }

  /** Starts an upload encrypted under `dataKey`; its document is written while the first segment is being received. */
  static open(store: FileStore, partnerId: string, dataKey: Buffer): StagedUpload {
    return new StagedUpload(store, new ObjectId(), partnerId, dataKey);
  }

  /** What a FileDoc records of these bytes. */
  get blobStore(): typeof BLOB_SEGMENTS {
    return BLOB_SEGMENTS;
  }

  /** Takes a chunk; waits only when a whole segment is ready and SEGMENT_INSERTS_IN_FLIGHT inserts are still under way. */
  async write(chunk: Uint8Array): Promise<void> {
    let rest = chunk;
    while (this.partsBytes + rest.length >= BLOB_SEGMENT_BYTES) {
      const take = BLOB_SEGMENT_BYTES - this.partsBytes;
      this.parts.push(rest.subarray(0, take));
      this.partsBytes += take;
      rest = rest.subarray(take);
      await this.flush(false);
    }
    if (rest.length > 0) {
      this.parts.push(rest);
      this.partsBytes += rest.length;
    }
  }

  /** Seals the parts gathered into the next segment and starts its insert once a slot is free. */
  private async flush(final: boolean): Promise<void> {
    const parts = this.parts;
    this.parts = [];
    this.partsBytes = 0;
    const n = this.segments++;
    const data = sealSegment(this.dataKey, this.id.toHexString(), n, final, parts);
    await this.recorded;
    while (this.inFlight.size >= SEGMENT_INSERTS_IN_FLIGHT) await Promise.race(this.inFlight);
    if (this.failure) throw this.failure.err;
    // A discard that began while this flush waited wins: no segment may land after its delete.
    if (this.discarded) return;
    const insert: Promise<void> = this.store.segments.insertOne({ _id: segmentId(this.id, n), data: new Binary(data) }).then(
      () => void this.inFlight.delete(insert),
      (err) => {
        this.failure ??= { err };
        this.inFlight.delete(insert);
      },
    );
    this.inFlight.add(insert);
  }

  /** Stores the rest (the final segment) and waits for every insert. */
  async finish(): Promise<void> {
    await this.recorded;
    await this.flush(true);
    await Promise.all(this.inFlight);
    if (this.failure) throw this.failure.err;
  }

  /** The bytes are now a file's: the upload document goes, the bytes stay. */
  async committed(): Promise<void> {
    await this.store.uploads.deleteOne({ _id: this.id });
  }

  /**
   * Deletes the bytes, once the inserts in flight (if any) have landed; the upload document stays,
   * marked, until the staging sweep has checked once more that nothing is left.
   */
  async discard(): Promise<void> {
    this.discarded = true;
    await this.recorded.catch(() => {});
    // No insert starts once `discarded` is set (flush checks it last), so these are all there will be.
    await Promise.all(this.inFlight);
    await this.store.uploads.updateOne({ _id: this.id }, { $set: { discardedAt: new Date() } });
    await deleteSegments(this.store, this.id, this.segments);
  }
}

/** A page of segment ids to delete when a blob's length is not known (an upload whose process died). */
const SWEEP_PAGE = 32;

/**
 * Deletes the segments of a blob, each by its `_id`. With `count`, exactly those; without, page by
 * page until a page finds none: inserts land in order but for the last SEGMENT_INSERTS_IN_FLIGHT,
 * so no stored segment lies beyond an empty page.
 */
export async function deleteSegments(store: FileStore, id: ObjectId, count?: number): Promise<void> {
  for (let from = 0; count === undefined || from < count; from += SWEEP_PAGE) {
    const to = count === undefined ? from + SWEEP_PAGE : Math.min(count, from + SWEEP_PAGE);
    const ops = [];
    for (let n = from; n < to; n++) ops.push({ deleteOne: { filter: { _id: segmentId(id, n) } } });
    const { deletedCount } = await store.segments.bulkWrite(ops, { ordered: false });
    if (count === undefined && deletedCount === 0) return;
  }
}

/** Deletes a blob wherever it is: a file's (by its size) or an upload's (`blobStore` as recorded on it). */
export async function deleteBlob(store: FileStore, blob: { blobId: ObjectId; blobStore?: typeof BLOB_SEGMENTS; size?: number }): Promise<void> {
  if (blob.blobStore === BLOB_SEGMENTS) return deleteSegments(store, blob.blobId, blob.size === undefined ? undefined : segmentCount(blob.size));
  // Blobs stored before the segments collection: GridFS.
  await store.db.collection(`${BLOB_BUCKET}.chunks`).deleteMany({ files_id: blob.blobId });
  await store.db.collection(`${BLOB_BUCKET}.files`).deleteOne({ _id: blob.blobId });
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
    if (!owner) await deleteBlob(store, { blobId: upload._id, blobStore: upload.blobStore });
    await store.uploads.deleteOne({ _id: upload._id });
  }
  return due.length;
}

/**
 * The plaintext bytes of a file's blob, opened segment by segment with the file's data key (the
 * read of the next segment under way while one is opened); a segment missing, moved, changed or
 * cut off throws. Blobs from before the segments collection are read from GridFS (readGridFsBlob).
 */
export async function readBlob(store: FileStore, file: Pick<FileDoc, "blobId" | "size" | "blobStore">, dataKey: Buffer | null): Promise<Buffer> {
  if (file.blobStore !== BLOB_SEGMENTS) return readGridFsBlob(store, file.blobId, dataKey);
  const id = file.blobId;
  const hex = id.toHexString();
  if (!dataKey) throw new Error(`blob ${hex} is sealed, and no data key was given`);
  const count = segmentCount(file.size);
  const read = (n: number) => {
    const p = store.segments.findOne({ _id: segmentId(id, n) });
    p.catch(() => {});
    return p;
  };
  // One buffer of the plaintext's size; each segment is opened and copied in, then dropped.
  const out = Buffer.allocUnsafe(file.size);
  let at = 0;
  let next = read(0);
  for (let n = 0; n < count; n++) {
    const segment = await next;
    if (n + 1 < count) next = read(n + 1);
    if (!segment) throw new Error(`blob ${hex}: segment ${n} missing`);
    const final = n === count - 1;
    const bytes = openSegment(dataKey, hex, n, final, segment.data.buffer);
    if (bytes.length !== (final ? file.size - at : BLOB_SEGMENT_BYTES)) throw new Error(`blob ${hex}: segment ${n} has the wrong size`);
    out.set(bytes, at);
    at += bytes.length;
  }
  return out;
}

/**
 * One part of a blob's plaintext: its segment `n` (of segmentCount(size); the final one may be
 * empty), read by `_id`. A blob from before the segments collection is read from GridFS whole and
 * cut into parts of the same size.
 */
export async function readBlobPart(store: FileStore, file: Pick<FileDoc, "blobId" | "size" | "blobStore">, dataKey: Buffer | null, n: number): Promise<{ bytes: Buffer; parts: number }> {
  const parts = segmentCount(file.size);
  if (n >= parts) throw new RangeError(`part ${n} of ${parts}`);
  if (file.blobStore !== BLOB_SEGMENTS) {
    const whole = await readGridFsBlob(store, file.blobId, dataKey);
    return { bytes: whole.subarray(n * BLOB_SEGMENT_BYTES, (n + 1) * BLOB_SEGMENT_BYTES), parts };
  }
  const id = file.blobId;
  const hex = id.toHexString();
  if (!dataKey) throw new Error(`blob ${hex} is sealed, and no data key was given`);
  const segment = await store.segments.findOne({ _id: segmentId(id, n) });
  if (!segment) throw new Error(`blob ${hex}: segment ${n} missing`);
  const final = n === parts - 1;
  const bytes = openSegment(dataKey, hex, n, final, segment.data.buffer);
  if (bytes.length !== (final ? file.size - n * BLOB_SEGMENT_BYTES : BLOB_SEGMENT_BYTES)) throw new Error(`blob ${hex}: segment ${n} has the wrong size`);
  return { bytes, parts };
}

/** The read of one stored segment: by `_id` alone. */
export const segmentFilter = (id: ObjectId, n: number) => ({ _id: segmentId(id, n) });

/** How the chunks of a GridFS blob are sealed (its metadata); blobs without it are plaintext, from before encryption at rest. */
export const BLOB_SEALING = "aes-256-gcm-segments.v1";

/**
 * The plaintext bytes of a blob stored in GridFS (before the segments collection), read chunk by
 * chunk by (files_id, n): lookups the unique chunk index answers on every server. (The driver's download stream asks for `{files_id}` sorted
 * by n, which the local server answers by scanning every chunk of every file.) Each chunk is opened
 * with the file's data key as it is read; a chunk missing, moved, changed or cut off throws.
 * A blob stored before encryption at rest (no `sealed` in its metadata) is read as it is.
 */
async function readGridFsBlob(store: FileStore, id: ObjectId, dataKey: Buffer | null): Promise<Buffer> {
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
    const chunk = await chunks.findOne({ files_id: id, n });
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
