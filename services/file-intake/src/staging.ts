import { Binary, ObjectId } from "mongodb";
import { decrypt, encrypt, SEAL_OVERHEAD, segmentAad } from "@pi/common/store/data-keys";
import { BLOB_SEGMENT_BYTES, segmentCount, segmentId, type FileDoc, type FileStore, type UploadDoc } from "./store.js";

/** A discarded upload's segments wait this long for a write that lands late. */
const DISCARDED_GRACE_MS = 60_000;
/** Longer than any upload can last: the gateway gives one upload at most 10 minutes. */
export const ABANDONED_AFTER_MS = 60 * 60_000;

/** Segment inserts of one upload under way at once: receiving, sealing and writing overlap in bounded memory. */
export const SEGMENT_INSERTS_IN_FLIGHT = 2;

/**
 * Bytes on their way in, one sealed `blob_segments` document per BLOB_SEGMENT_BYTES (the final one
 * may be empty), a file's once a FileDoc names them. Buffers are reused (docs/performance.md).
 */
export class StagedUpload {
  private discarded = false;
  private plain: Buffer | undefined;
  private filled = 0;
  private segments = 0;
  private readonly spare: Buffer[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private failure: { err: unknown } | undefined;

  /** The upload document; no segment is written before it is stored, so the sweep can find every byte. */
  private readonly recorded: Promise<unknown>;

  readonly id = new ObjectId();

  /** Starts an upload encrypted under `dataKey`. */
  constructor(
    private readonly store: FileStore,
    partnerId: string,
    private readonly dataKey: Buffer,
  ) {
    const doc: UploadDoc = { _id: this.id, partnerId, startedAt: new Date(), discardedAt: null };
    this.recorded = store.uploads.insertOne(doc);
    this.recorded.catch(() => {});
  }

  /** Takes a chunk (copied: the caller may reuse it). */
  async write(chunk: Uint8Array): Promise<void> {
    for (let at = 0; at < chunk.length; ) {
      this.plain ??= Buffer.allocUnsafe(BLOB_SEGMENT_BYTES);
      const take = Math.min(BLOB_SEGMENT_BYTES - this.filled, chunk.length - at);
      this.plain.set(chunk.subarray(at, at + take), this.filled);
      this.filled += take;
      at += take;
      if (this.filled === BLOB_SEGMENT_BYTES) await this.flush(false);
    }
  }

  private async flush(final: boolean): Promise<void> {
    const n = this.segments++;
    await this.recorded;
    while (this.inFlight.size >= SEGMENT_INSERTS_IN_FLIGHT) await Promise.race(this.inFlight);
    if (this.failure) throw this.failure.err;
    // A discard that began while this flush waited wins: no segment may land after its delete.
    if (this.discarded) return;
    const box = this.spare.pop() ?? Buffer.allocUnsafe((final ? this.filled : BLOB_SEGMENT_BYTES) + SEAL_OVERHEAD);
    const data = encrypt(
      this.dataKey,
      this.plain?.subarray(0, this.filled) ?? Buffer.alloc(0),
      segmentAad(this.id.toHexString(), n, final),
      box,
    );
    this.filled = 0;
    const insert: Promise<void> = this.store.segments
      .insertOne({ _id: segmentId(this.id, n), data: new Binary(data) })
      .then(
        () => {
          this.inFlight.delete(insert);
          this.spare.push(box);
        },
        (err) => {
          this.failure ??= { err };
          this.inFlight.delete(insert);
        },
      );
    this.inFlight.add(insert);
  }

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

  /** Deletes the bytes; the upload document stays, marked, until the staging sweep checks once more. */
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

/** `count` segments, or page by page until one finds none (inserts land in order but for the last few in flight). */
export async function deleteSegments(store: FileStore, id: ObjectId, count?: number): Promise<void> {
  for (let from = 0; count === undefined || from < count; from += SWEEP_PAGE) {
    const to = count === undefined ? from + SWEEP_PAGE : Math.min(count, from + SWEEP_PAGE);
    const ops = [];
    for (let n = from; n < to; n++) ops.push({ deleteOne: { filter: { _id: segmentId(id, n) } } });
    const { deletedCount } = await store.segments.bulkWrite(ops, { ordered: false });
    if (count === undefined && deletedCount === 0) return;
  }
}

/** Removes what uploads left: discarded ones after a grace (a write may land late), abandoned ones; never a file's bytes. */
export async function sweepStaging(store: FileStore, now: Date): Promise<number> {
  const due = await store.uploads
    .find({
      $or: [
        { discardedAt: { $ne: null, $lte: new Date(now.getTime() - DISCARDED_GRACE_MS) } },
        { startedAt: { $lte: new Date(now.getTime() - ABANDONED_AFTER_MS) } },
      ],
    })
    .limit(500)
    .toArray();
  for (const upload of due) {
    const owner = await store.files.findOne({ blobId: upload._id }, { projection: { _id: 1 } });
    if (!owner) await deleteSegments(store, upload._id);
    await store.uploads.deleteOne({ _id: upload._id });
  }
  return due.length;
}

/** Segment `n` of a blob's plaintext (of segmentCount(size); the final one may be empty). */
export async function readBlobPart(
  store: FileStore,
  file: Pick<FileDoc, "blobId" | "size">,
  dataKey: Buffer,
  n: number,
): Promise<{ bytes: Buffer; parts: number }> {
  const parts = segmentCount(file.size);
  if (n >= parts) throw new RangeError(`part ${n} of ${parts}`);
  const id = file.blobId;
  const hex = id.toHexString();
  const segment = await store.segments.findOne({ _id: segmentId(id, n) });
  if (!segment) throw new Error(`blob ${hex}: segment ${n} missing`);
  const final = n === parts - 1;
  const bytes = decrypt(dataKey, segment.data.buffer, segmentAad(hex, n, final));
  if (bytes.length !== (final ? file.size - n * BLOB_SEGMENT_BYTES : BLOB_SEGMENT_BYTES))
    throw new Error(`blob ${hex}: segment ${n} has the wrong size`);
  return { bytes, parts };
}
