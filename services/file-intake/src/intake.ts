import { createHash, randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { RpcError, Status } from "@pi/common/rpc/errors";
import type { fileintakev1 } from "@pi/proto";
import { DATA_KEY_BYTES, type KeyWrapper } from "@pi/common/store/data-keys";
import { newId } from "@pi/common/rules/ids";
import { type AcceptedType, recognise, SNIFF_BYTES, TEXT_MEDIA_TYPE, TextChecker } from "@pi/common/rules/media-types";
import type { Logger } from "@pi/common/runtime/logger";
import { modeFromProto } from "@pi/common/rules/mode";
import { inSpan } from "@pi/common/runtime/telemetry";
import { sealMeta } from "./at-rest.js";
import { fingerprint } from "./idempotency.js";
import type { IdempotencyKeys } from "./keys.js";
import { refusalDelay } from "./no-oracle.js";
import type { FileOutbox } from "./outbox.js";
import { StagedUpload } from "./staging.js";
import { newFileDoc, type FileDoc, type FileMode, type FileStore } from "./store.js";
import { sandboxOutcome } from "./sandbox-outcome.js";
import type { Reservation, StorageQuota } from "./usage.js";
import { bytesVerdict, claimVerdict, noActiveConnection, protocol, trailerVerdict } from "./verdicts.js";

/** The one question file-intake asks the connection service: yes or no, never why. */
export type ConnectionCheck = (partnerId: string, mode: FileMode, elderAddress: string) => Promise<boolean>;

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

type Part = fileintakev1.SubmitFileRequest["part"];

function parseHeader(part: Part | undefined) {
  if (part?.case !== "header") throw protocol("the first message must be the header");
  const h = part.value;
  const mode = modeFromProto(h.mode);
  // The key's shape is the gateway's to check (a header, 400 before the body).
  if (!h.partnerId || !mode) throw protocol("partner_id and mode are required");
  return {
    partnerId: h.partnerId,
    mode,
    idempotencyKey: h.idempotencyKey ?? null,
    declaredBytes: h.declaredBytes === undefined ? undefined : Number(h.declaredBytes),
  };
}

/** The gateway's stream (header, chunks, trailer), judged by verdicts.ts as it arrives; a refusal leaves nothing behind. */
export async function submitFile(
  deps: IntakeDeps,
  requests: AsyncIterable<fileintakev1.SubmitFileRequest>,
  signal?: AbortSignal,
) {
  const it = requests[Symbol.asyncIterator]();
  const next = async (): Promise<Part> => {
    const r = await it.next().catch((err: unknown) => {
      // The caller went away mid-upload (the partner disconnected, or the gateway gave up).
      throw err instanceof RpcError
        ? err
        : new RpcError("the upload stream was closed by the caller", Status.CANCELLED, undefined, err);
    });
    if (r.done) throw protocol("the stream ended before the trailer");
    return r.value.part;
  };
  const header = parseHeader(await next());
  const reservation = await step("reserve quota", () =>
    deps.quota.reserve(header.partnerId, header.mode, header.declaredBytes),
  );
  try {
    return await receive(deps, header, reservation, next, signal);
  } finally {
    await reservation.release().catch((err) => deps.logger.warn({ err }, "storage quota hold left for the repair"));
  }
}

async function receive(
  deps: IntakeDeps,
  header: ReturnType<typeof parseHeader>,
  reservation: Reservation,
  next: () => Promise<Part>,
  signal?: AbortSignal,
) {
  const head = await readHead(next);
  // A file the gateway cut short before its head was whole is not typed on a part of it.
  const typed = head.bytes.length >= SNIFF_BYTES || !head.trailer?.refused || head.trailer.fileComplete;
  const type =
    typed && head.bytes.length > 0 ? ((await recognise(head.bytes.subarray(0, SNIFF_BYTES))) ?? null) : undefined;
  const early = bytesVerdict({ size: head.bytes.length, maxBytes: deps.maxFileBytes, type, text: true });
  if (early) throw early;

  // The file's own data key, stored only wrapped (while the bytes arrive).
  const dataKey = randomBytes(DATA_KEY_BYTES);
  const wrapped = deps.dataKeys.wrap(dataKey);
  wrapped.catch(() => {});
  const staged = new StagedUpload(deps.store, header.partnerId, dataKey);
  const { partnerId, mode, idempotencyKey: key } = header;
  const fileId = newId("file");
  let committed = false;
  let owned = false;
  let letGo = () => {};
  try {
    const file = await step("stage bytes", () => stageBytes(deps, reservation, staged, type, head, next));
    const fields = trailerVerdict(file.trailer, file, deps.addressDomain);
    if ("refusal" in fields) throw fields.refusal;
    const purpose = file.trailer.purpose ?? null;

    // These three run at once; their verdicts are taken in this order.
    const stored = staged.finish();
    const claim =
      key === null
        ? undefined
        : deps.keys.claim(
            partnerId,
            mode,
            key,
            fingerprint({ sha256: file.sha256, elder: fields.elder, purpose, mode }),
            fileId,
            signal,
          );
    const connected = checkConnection(deps.connections, partnerId, mode, fields.elder);
    const [storedResult, claimResult] = await step("store last bytes, claim key", () =>
      Promise.allSettled([stored, claim]),
    );
    owned = claimResult.status === "fulfilled" && claimResult.value?.kind === "owned";
    if (owned) letGo = deps.keys.hold(partnerId, mode, key!, fileId);
    const verdict = claimVerdict(storedResult, claimResult);
    if (verdict && "refusal" in verdict) throw verdict.refusal;
    if (verdict) return { id: verdict.replay };
    if (!(await step("connection verdict", () => connected))) throw noActiveConnection();
    const doc = newFileDoc(
      {
        _id: fileId,
        partnerId,
        mode,
        dataKey: await wrapped,
        sealedMeta: sealMeta(dataKey, fileId, { elder: fields.elder, purpose, sha256: file.sha256 }),
        mediaType: type!.mediaType,
        size: file.size,
        blobId: staged.id,
        idempotencyKey: key,
        textLength: file.textLength,
        ...(sandboxOutcome(mode, purpose) === "failed" ? { sandboxOutcome: "failed" as const } : {}),
      },
      new Date(),
    );
    // A holder whose claim ran out (taken over by a retry after this request stalled) writes nothing.
    if (owned && !(await deps.keys.renew(partnerId, mode, key!, fileId))) {
      throw new RpcError("the Idempotency-Key's claim was taken over; retry with the same key", Status.UNAVAILABLE);
    }
    await step("insert file", () => deps.store.files.insertOne(doc));
    committed = true;
    await step("after commit", () => afterCommit(deps, reservation, staged, doc));
    return { id: fileId };
  } finally {
    letGo();
    if (!committed && owned)
      await deps.keys
        .release(partnerId, mode, key!, fileId)
        .catch((err) => deps.logger.warn({ err }, "idempotency claim left for its lease to end"));
    if (!committed)
      await staged
        .discard()
        .catch((err) =>
          deps.logger.warn({ err, uploadId: staged.id.toHexString() }, "staged bytes left for the sweep"),
        );
  }
}

const step = <T>(name: string, fn: () => Promise<T>) => inSpan(`upload: ${name}`, {}, fn);

/** Enough bytes to decide the type (SNIFF_BYTES), or the whole file when it is shorter. */
async function readHead(next: () => Promise<Part>) {
  let bytes = Buffer.alloc(0);
  let trailer: fileintakev1.SubmitFileTrailer | undefined;
  while (bytes.length < SNIFF_BYTES && !trailer) {
    const part = await next();
    if (part.case === "chunk") bytes = Buffer.concat([bytes, part.value]);
    else if (part.case === "trailer") trailer = part.value;
    else throw protocol("expected a chunk or the trailer");
  }
  return { bytes, trailer };
}

/** Stages the head and every chunk after it, judging each (bytesVerdict) and growing the quota's hold, until the trailer. */
async function stageBytes(
  deps: IntakeDeps,
  reservation: Reservation,
  staged: StagedUpload,
  type: AcceptedType | null | undefined,
  head: { bytes: Buffer; trailer?: fileintakev1.SubmitFileTrailer },
  next: () => Promise<Part>,
) {
  const hash = createHash("sha256");
  const text = type?.mediaType === TEXT_MEDIA_TYPE ? new TextChecker() : undefined;
  let size = 0;
  const take = async (chunk: Uint8Array) => {
    size += chunk.length;
    const refusal = bytesVerdict({ size, maxBytes: deps.maxFileBytes, type, text: !text || text.push(chunk) });
    if (refusal) throw refusal;
    await reservation.cover(size);
    hash.update(chunk);
    await staged.write(chunk);
  };
  await take(head.bytes);
  let trailer = head.trailer;
  while (!trailer) {
    const part = await next();
    if (part.case === "chunk") await take(part.value);
    else if (part.case === "trailer") trailer = part.value;
    else throw protocol("expected a chunk or the trailer");
  }
  return {
    trailer,
    size,
    sha256: hash.digest("hex"),
    textEnds: () => !text || text.end(),
    textLength: text ? text.length : null,
  };
}

/** The connection service's yes or no; a "no" held to the next step of CONNECTION_REFUSAL_MS (no-oracle.ts). */
function checkConnection(connections: ConnectionCheck, partnerId: string, mode: FileMode, elder: string) {
  const started = performance.now();
  const connected = connections(partnerId, mode, elder).then(async (active) => {
    if (!active) await sleep(refusalDelay(performance.now() - started));
    return active;
  });
  connected.catch(() => {});
  return connected;
}

/** The file is written: its hold becomes stored bytes, its key replays it, its upload document and event follow. */
async function afterCommit(deps: IntakeDeps, reservation: Reservation, staged: StagedUpload, doc: FileDoc) {
  const fileId = doc._id;
  await reservation
    .settle(doc.size)
    .catch((err) => deps.logger.warn({ err, fileId }, "storage quota hold left for the repair"));
  if (doc.idempotencyKey !== null) await deps.keys.commit(doc.partnerId, doc.mode, doc.idempotencyKey, fileId);
  // Bookkeeping only: an upload document left behind is removed by the staging sweep.
  staged.committed().catch((err) => deps.logger.warn({ err, fileId }, "upload document left for the sweep"));
  deps.outbox.afterWrite(fileId);
}
