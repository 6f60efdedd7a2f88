import { createHash, randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { type commonv1, fileintakev1 } from "@pi/proto";
import { checkElderAddress } from "@pi/common/elder-address";
import { DATA_KEY_BYTES, type KeyWrapper } from "@pi/common/data-keys";
import { ErrorReason, serviceError } from "@pi/common/errors";
import { newId } from "@pi/common/ids";
import { recognise, SNIFF_BYTES, TEXT_MEDIA_TYPE, TextChecker } from "@pi/common/media-types";
import type { Logger } from "@pi/common/logger";
import { modeFromProto } from "@pi/common/mode";
import { sealMeta } from "./at-rest.js";
import { checkIdempotencyKey, fingerprint } from "./idempotency.js";
import type { IdempotencyKeys } from "./keys.js";
import { refusalDelay } from "./no-oracle.js";
import type { FileOutbox } from "./outbox.js";
import { StagedUpload } from "./staging.js";
import { newFileDoc, type FileDoc, type FileMode, type FileStore } from "./store.js";
import { sandboxOutcome } from "./sandbox-outcome.js";
import type { Reservation, StorageQuota } from "./usage.js";

/** The one question file-intake asks the connection service: yes or no, never why. */
export interface ConnectionCheck {
  isActive(partnerId: string, mode: FileMode, elderAddress: string): Promise<boolean>;
}

export interface IntakeDeps {
  store: FileStore;
  keys: IdempotencyKeys;
  outbox: FileOutbox;
  connections: ConnectionCheck;
  maxFileBytes: number;
  addressDomain: string;
  /** The KEKs that wrap each file's data key (DATA_KEYS). */
  dataKeys: KeyWrapper;
  quota: StorageQuota;
  logger: Logger;
}

export const FILE_ID = /^file_[0-9A-Za-z]{22}$/;

const tooLarge = () => serviceError(ErrorReason.FILE_TOO_LARGE, "the file is larger than the limit", "file");
const unsupported = () => serviceError(ErrorReason.UNSUPPORTED_MEDIA_TYPE, "the file's type is not accepted", "file");
const protocol = (message: string) => new ConnectError(message, Code.InvalidArgument);

type Part = fileintakev1.SubmitFileRequest["part"];

interface Header {
  partnerId: string;
  mode: FileMode;
  idempotencyKey: string | null;
  declaredBytes: number | undefined;
}

function parseHeader(part: Part | undefined): Header {
  if (part?.case !== "header") throw protocol("the first message must be the header");
  const h = part.value;
  const mode = modeFromProto(h.mode);
  if (!h.partnerId || !mode) throw protocol("partner_id and mode are required");
  if (h.idempotencyKey !== undefined) {
    const check = checkIdempotencyKey(h.idempotencyKey);
    if (!check.ok)
      throw serviceError(ErrorReason.INVALID_REQUEST, `Idempotency-Key ${check.reason}.`, "Idempotency-Key");
  }
  return {
    partnerId: h.partnerId,
    mode,
    idempotencyKey: h.idempotencyKey ?? null,
    declaredBytes: h.declaredBytes === undefined ? undefined : Number(h.declaredBytes),
  };
}

/**
 * Reads the stream the gateway sends: header, chunks, trailer. The order of what can fail follows
 * what is known when: the storage quota from the header, the type from the first SNIFF_BYTES before
 * anything is stored, the size (and the quota again) while the bytes are staged, the text rule to
 * the last byte, then the trailer's fields, the idempotency key, and last the connection. Only then
 * is the file record written; whatever fails before leaves no file, no bytes and no reservation.
 */
export async function submitFile(
  deps: IntakeDeps,
  requests: AsyncIterable<fileintakev1.SubmitFileRequest>,
  signal?: AbortSignal,
) {
  const it = requests[Symbol.asyncIterator]();
  const next = async (): Promise<Part> => {
    let r: IteratorResult<fileintakev1.SubmitFileRequest>;
    try {
      r = await it.next();
    } catch (err) {
      // The caller went away mid-upload (the partner disconnected, or the gateway refused the body).
      throw err instanceof ConnectError
        ? err
        : new ConnectError("the upload stream was closed by the caller", Code.Canceled, undefined, undefined, err);
    }
    if (r.done) throw protocol("the stream ended before the trailer");
    return r.value.part;
  };
  const header = parseHeader(await next());
  const reservation = await deps.quota.reserve(header.partnerId, header.mode, header.declaredBytes);
  try {
    return await receive(deps, header, reservation, next, signal);
  } finally {
    await reservation.release().catch((err) => deps.logger.warn({ err }, "storage quota hold left for the repair"));
  }
}

async function receive(
  deps: IntakeDeps,
  header: Header,
  reservation: Reservation,
  next: () => Promise<Part>,
  signal?: AbortSignal,
) {
  const { store, maxFileBytes } = deps;
  // The head: enough bytes to decide the type, or the whole file when it is shorter.
  const head: Uint8Array[] = [];
  let headBytes = 0;
  let trailer: fileintakev1.SubmitFileTrailer | undefined;
  while (headBytes < SNIFF_BYTES && !trailer) {
    const part = await next();
    if (part.case === "chunk") {
      head.push(part.value);
      headBytes += part.value.length;
    } else if (part.case === "trailer") trailer = part.value;
    else throw protocol("expected a chunk or the trailer");
  }
  if (headBytes > maxFileBytes) throw tooLarge();
  if (headBytes === 0) throw serviceError(ErrorReason.INVALID_REQUEST, "The file is empty.", "file");
  const headBuffer = Buffer.concat(head);
  const type = await recognise(headBuffer.subarray(0, SNIFF_BYTES));
  if (!type) throw unsupported();

  // The file's own data key: its bytes are encrypted with it as they are staged; it is stored only
  // wrapped by the newest KEK (wrapped while the bytes arrive), in the file record.
  const dataKey = randomBytes(DATA_KEY_BYTES);
  const wrapped = deps.dataKeys.wrap(dataKey);
  wrapped.catch(() => {});
  const staged = StagedUpload.open(store, header.partnerId, dataKey);
  let committed = false;
  try {
    const hash = createHash("sha256");
    const text = type.mediaType === TEXT_MEDIA_TYPE ? new TextChecker() : undefined;
    let size = 0;
    const take = async (chunk: Uint8Array) => {
      size += chunk.length;
      if (size > maxFileBytes) throw tooLarge();
      if (text && !text.push(chunk)) throw unsupported();
      await reservation.cover(size);
      hash.update(chunk);
      await staged.write(chunk);
    };
    await take(headBuffer);
    while (!trailer) {
      const part = await next();
      if (part.case === "chunk") await take(part.value);
      else if (part.case === "trailer") trailer = part.value;
      else throw protocol("expected a chunk or the trailer");
    }
    if (text && !text.end()) throw unsupported();

    const elder = checkElderAddress(trailer.elderAddress, deps.addressDomain);
    if (!elder.ok) throw serviceError(ErrorReason.INVALID_REQUEST, `elder ${elder.reason}.`, "elder");
    const purpose = trailer.purpose ?? null;
    const sha256 = hash.digest("hex");
    const fileId = newId("file");
    const { partnerId, mode, idempotencyKey: key } = header;

    // Storing the last bytes, the idempotency claim and the connection check run at once; their
    // verdicts are taken in the documented order: storage, idempotency, connection.
    const stored = staged.finish();
    const claim =
      key === null
        ? undefined
        : deps.keys.claim(
            partnerId,
            mode,
            key,
            fingerprint({ sha256, elder: elder.address, purpose, mode }),
            fileId,
            signal,
          );
    const checkStarted = performance.now();
    const connected = deps.connections.isActive(partnerId, mode, elder.address).then(async (active) => {
      if (!active) await sleep(refusalDelay(performance.now() - checkStarted));
      return active;
    });
    connected.catch(() => {});
    let owned = false;
    let letGo = () => {};
    try {
      const [storedResult, claimResult] = await Promise.allSettled([stored, claim]);
      owned = claimResult.status === "fulfilled" && claimResult.value?.kind === "owned";
      if (owned) letGo = deps.keys.hold(partnerId, mode, key!, fileId);
      if (storedResult.status === "rejected") throw storedResult.reason;
      if (claimResult.status === "rejected") throw claimResult.reason;
      if (claimResult.value?.kind === "replay") return { id: claimResult.value.fileId };
      if (claimResult.value?.kind === "conflict") {
        throw serviceError(
          ErrorReason.IDEMPOTENCY_KEY_REUSE,
          "this Idempotency-Key was used with a different payload",
          "Idempotency-Key",
        );
      }
      // Last, so that every refusal before it is the same whatever the connection; and it is
      // the only check whose answer must not tell why, not even by its time (no-oracle.ts).
      if (!(await connected)) throw serviceError(ErrorReason.NO_ACTIVE_CONNECTION, "no active connection");
      const doc = newFileDoc(
        {
          _id: fileId,
          partnerId,
          mode,
          dataKey: await wrapped,
          sealedMeta: sealMeta(dataKey, fileId, { elder: elder.address, purpose, sha256 }),
          mediaType: type.mediaType,
          size,
          blobId: staged.id,
          idempotencyKey: key,
          textLength: text ? text.length : null,
          ...(sandboxOutcome(mode, purpose) === "failed" ? { sandboxOutcome: "failed" as const } : {}),
        },
        new Date(),
      );
      // A holder whose claim ran out (taken over by a retry after this request stalled) writes nothing.
      if (owned && !(await deps.keys.renew(partnerId, mode, key!, fileId))) {
        throw new ConnectError("the Idempotency-Key's claim was taken over; retry with the same key", Code.Unavailable);
      }
      await store.files.insertOne(doc);
      committed = true;
      await reservation
        .settle(size)
        .catch((err) => deps.logger.warn({ err, fileId }, "storage quota hold left for the repair"));
      if (key !== null) await deps.keys.commit(partnerId, mode, key, fileId);
      // Bookkeeping only: an upload document left behind is removed by the staging sweep.
      staged.committed().catch((err) => deps.logger.warn({ err, fileId }, "upload document left for the sweep"));
      deps.outbox.afterWrite(fileId);
      return { id: fileId };
    } finally {
      letGo();
      if (!committed && owned)
        await deps.keys
          .release(partnerId, mode, key!, fileId)
          .catch((err) => deps.logger.warn({ err }, "idempotency claim left for its lease to end"));
    }
  } finally {
    if (!committed)
      await staged
        .discard()
        .catch((err) =>
          deps.logger.warn({ err, uploadId: staged.id.toHexString() }, "staged bytes left for the sweep"),
        );
  }
}

const statusEnum: Record<FileDoc["status"], fileintakev1.FileStatus> = {
  received: fileintakev1.FileStatus.RECEIVED,
  processed: fileintakev1.FileStatus.PROCESSED,
  failed: fileintakev1.FileStatus.FAILED,
};

/** The read of GET /v1/files/{id}: by _id alone (the server answers it from the _id index); ownership is checked in code. */
export const fileById = (id: string) => ({ _id: id });

/** The partner's own file in the credential's mode; any other id is the same NOT_FOUND. */
export async function getFile(store: FileStore, req: { partnerId: string; id: string; mode: commonv1.Mode }) {
  const mode = modeFromProto(req.mode);
  const notFound = () => serviceError(ErrorReason.NOT_FOUND, "no such file");
  if (!mode || !req.partnerId || !FILE_ID.test(req.id)) throw notFound();
  const doc = await store.files.findOne(fileById(req.id), { projection: { partnerId: 1, mode: 1, status: 1 } });
  if (!doc || doc.partnerId !== req.partnerId || doc.mode !== mode) throw notFound();
  return { id: doc._id, status: statusEnum[doc.status] };
}
