import type { IncomingMessage } from "node:http";
import type { Readable } from "node:stream";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Middleware } from "koa";
import multer from "@koa/multer";
import multerCore from "multer";
import { fileintakev1 } from "@pi/proto";
import { checkElderAddress, filesAccepted, filesRefused, recognise, SNIFF_BYTES, TEXT_MEDIA_TYPE, TextChecker, type FileIntakeClient, modeToProto } from "@pi/common";
import type { GatewayContext } from "../context.js";
import { gatewayRouter } from "../router.js";
import { PartnerError, partnerErrorFromInternal, storageQuotaExceeded } from "../errors.js";
import { requireScope } from "../middleware.js";
import { TerminalStatusCache } from "../terminal-status-cache.js";
import { TransferRate, UploadSlots } from "../upload-guards.js";

// POST /v1/files and GET /v1/files/{id}. The order of checks is in docs/files.md; in short:
// bearer (401), scope (403), the request's own headers (415, 400), the uploads in flight and the
// storage quota (429, before a byte of the body is read), then the multipart body in the
// order its parts arrive (400 for a bad part; for the file, 415 from its first bytes, 413 at
// MAX_FILE_BYTES + 1, 415 for text that stops being text), the body's required fields (400), then
// file-intake's idempotency (409) and connection (403) checks. The bytes stream through to
// file-intake as they arrive; nothing is committed before every check has passed.

export const FILES_SCOPE = "files:write";
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** The text fields (`elder`, `purpose`) are capped so a body cannot grow without a file. */
export const MAX_FIELD_BYTES = 64 * 1024;
/** One upload may take this long from its first byte to its answer (a slow link at 25 MB). */
export const UPLOAD_TIMEOUT_MS = 10 * 60_000;
const FILE_ID = /^file_[0-9A-Za-z]{22}$/;
/**
 * Bytes of the file per message to file-intake: every message costs both sides the same work
 * whatever its size (its framing, protobuf, Connect's stream plumbing), so chunks are gathered
 * (one copy) rather than sent one by one; at most this much of an upload waits in the gateway.
 */
export const MESSAGE_BYTES = 256 * 1024;
const FIELDS = new Set(["elder", "purpose"]);

const statusName: Record<fileintakev1.FileStatus, string> = {
  [fileintakev1.FileStatus.UNSPECIFIED]: "received",
  [fileintakev1.FileStatus.RECEIVED]: "received",
  [fileintakev1.FileStatus.PROCESSED]: "processed",
  [fileintakev1.FileStatus.FAILED]: "failed",
};

export function fileResource(f: fileintakev1.PartnerFile | undefined) {
  if (!f) throw new PartnerError("internal_error");
  return { id: f.id, status: statusName[f.status] };
}

const invalid = (message: string, param?: string) => new PartnerError("invalid_request", { message, param });

/** The Idempotency-Key header: absent, or 1 to 255 printable ASCII characters, given once. */
export function parseIdempotencyKey(value: string | string[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (Array.isArray(value)) throw invalid("Idempotency-Key must be given once.", "Idempotency-Key");
  if (value.length === 0) throw invalid("Idempotency-Key must not be empty.", "Idempotency-Key");
  if (value.length > MAX_IDEMPOTENCY_KEY_LENGTH) throw invalid(`Idempotency-Key must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters.`, "Idempotency-Key");
  if (!/^[\x20-\x7e]+$/.test(value)) throw invalid("Idempotency-Key must be printable ASCII.", "Idempotency-Key");
  return value;
}

/**
 * The text fields of the body: only `elder` (a well-formed address) and `purpose` (any string,
 * kept as sent), each at most once. Called with the fields read so far when the file part starts
 * (complete = false) and with all of them at the end (complete = true: `elder` is then required).
 */
export function checkFields(fields: unknown, domain: string, complete: boolean): { elder?: string; purpose?: string } {
  const entries = Object.entries((fields ?? {}) as Record<string, unknown>);
  const out: { elder?: string; purpose?: string } = {};
  for (const [name, value] of entries) {
    if (name === "file") throw invalid("file must be a file part (with a filename).", "file");
    if (!FIELDS.has(name)) throw invalid(`Unknown field ${JSON.stringify(name)}.`, name);
    if (typeof value !== "string") throw invalid(`${name} must be given once, as a text field.`, name);
    if (name === "elder") {
      const check = checkElderAddress(value, domain);
      if (!check.ok) throw invalid(`elder ${check.reason}.`, "elder");
      out.elder = check.address;
    } else out.purpose = value;
  }
  if (complete && out.elder === undefined) throw invalid("elder is required.", "elder");
  return out;
}

const multerMessages: Record<string, { message: string; param?: string }> = {
  LIMIT_FILE_COUNT: { message: "Send exactly one file, in the field file.", param: "file" },
  LIMIT_UNEXPECTED_FILE: { message: "Send exactly one file, in the field file.", param: "file" },
  LIMIT_PART_COUNT: { message: "The body has too many parts; send file, elder and optionally purpose." },
  LIMIT_FIELD_COUNT: { message: "The body has too many fields; send elder and optionally purpose." },
  LIMIT_FIELD_VALUE: { message: `A text field is longer than ${MAX_FIELD_BYTES} bytes.` },
  LIMIT_FIELD_KEY: { message: "A field name is too long." },
  MISSING_FIELD_NAME: { message: "A part has no field name." },
  INVALID_FIELD_NAME: { message: "A field name is malformed." },
  LIMIT_FIELD_NESTING: { message: "A field name is malformed." },
  LIMIT_FIELD_ARRAY_INDEX: { message: "A field name is malformed." },
};

// What busboy (the multipart parser under multer) and multer say about a body that is not well-formed
// multipart, or that stopped arriving.
const malformedBody = new Set([
  "Malformed part header",
  "Unexpected end of form",
  "Unexpected end of file",
  "Multipart: Boundary not found",
  "Malformed content type",
  "Missing Content-Type",
  "Request aborted",
  "Request closed",
  "Request error",
]);

/** Maps whatever the upload failed with to the one partner error for it. */
export function uploadError(err: unknown): PartnerError {
  if (err instanceof PartnerError) return err;
  if (err instanceof multerCore.MulterError) {
    if (err.code === "LIMIT_FILE_SIZE") return new PartnerError("file_too_large", { param: "file" });
    const known = multerMessages[err.code];
    return invalid(known?.message ?? "The multipart body is malformed.", known?.param ?? err.field);
  }
  if (err instanceof Error && err.constructor === Error && (malformedBody.has(err.message) || err.message.startsWith("Unsupported content type"))) {
    return invalid("The body is not well-formed multipart/form-data.");
  }
  return partnerErrorFromInternal(err);
}

type SubmitRequest = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
type SubmitHeader = MessageInitShape<typeof fileintakev1.SubmitFileHeaderSchema>;
type SubmitTrailer = MessageInitShape<typeof fileintakev1.SubmitFileTrailerSchema>;

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/**
 * One file on its way to file-intake. Its first bytes are read and typed here, before file-intake
 * is even called (415 for a type we do not accept); then a Connect client stream is fed straight
 * from the multipart file stream: pulled, so HTTP/2 flow control slows the partner's upload when
 * file-intake is slower, and at most a few chunks are in the gateway at a time. Every byte check
 * (type, plain text to the last byte, size) happens here as the part is read, so a refusal comes in
 * the order of the body's parts; file-intake repeats them before it stores anything. The fields
 * that follow the file part travel last, in the trailer; cancelling the stream makes file-intake
 * drop what it staged.
 */
export class Submission {
  /** Resolves with the byte count once the whole file part is checked and forwarded; rejects when anything fails first. */
  readonly forwarded: Promise<number>;
  private readonly trailer = deferred<SubmitTrailer>();
  private readonly abort = new AbortController();
  private response?: Promise<fileintakev1.SubmitFileResponse>;

  constructor(
    private readonly client: FileIntakeClient,
    private readonly header: SubmitHeader,
    private readonly file: Readable & { truncated?: boolean },
    private readonly maxBytes: number,
  ) {
    this.forwarded = this.start();
    this.forwarded.catch(() => {});
  }

  private async start(): Promise<number> {
    const { maxBytes, file, trailer, abort } = this;
    const chunks = (file as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
    let size = 0;
    const counted = (chunk: Buffer) => {
      size += chunk.length;
      // The multipart parser hands over MAX_FILE_BYTES + 1 bytes at most; the last is never sent on.
      if (size > maxBytes) throw new PartnerError("file_too_large", { param: "file" });
      return chunk;
    };
    const head: Buffer[] = [];
    let ended = false;
    while (size < SNIFF_BYTES) {
      const next = await chunks.next();
      if (next.done) {
        ended = true;
        break;
      }
      head.push(counted(next.value));
    }
    if (size === 0 && ended) throw invalid("The file is empty.", "file");
    const headBuffer = Buffer.concat(head);
    const type = await recognise(headBuffer.subarray(0, SNIFF_BYTES));
    if (!type) throw new PartnerError("unsupported_media_type", { param: "file" });
    const text = type.mediaType === TEXT_MEDIA_TYPE ? new TextChecker() : undefined;
    const checked = (chunk: Buffer) => {
      if (text && !text.push(chunk)) throw new PartnerError("unsupported_media_type", { param: "file" });
      return chunk;
    };

    const forwarded = deferred<number>();
    async function* requests(header: SubmitHeader): AsyncGenerator<SubmitRequest> {
      try {
        yield { part: { case: "header", value: header } };
        // The multipart parser hands over chunks as the socket delivers them (64 KiB at most);
        // they are gathered into messages of MESSAGE_BYTES, each checked as it comes.
        let batch: Buffer[] = [checked(headBuffer)];
        let batchBytes = headBuffer.length;
        while (!ended) {
          const next = await chunks.next();
          if (next.done) break;
          const chunk = checked(counted(next.value));
          batch.push(chunk);
          batchBytes += chunk.length;
          if (batchBytes >= MESSAGE_BYTES) {
            yield { part: { case: "chunk", value: batch.length === 1 ? batch[0]! : Buffer.concat(batch, batchBytes) } };
            batch = [];
            batchBytes = 0;
          }
        }
        if (batchBytes > 0) yield { part: { case: "chunk", value: batch.length === 1 ? batch[0]! : Buffer.concat(batch, batchBytes) } };
        if (file.truncated) throw new PartnerError("file_too_large", { param: "file" });
        if (text && !text.end()) throw new PartnerError("unsupported_media_type", { param: "file" });
        forwarded.resolve(size);
        yield { part: { case: "trailer", value: await trailer.promise } };
      } catch (err) {
        forwarded.reject(err);
        abort.abort(err);
        throw err;
      }
    }
    this.response = this.client.submitFile(requests(this.header), { signal: abort.signal, timeoutMs: UPLOAD_TIMEOUT_MS });
    // file-intake may fail before the file has ended (it could not store a chunk).
    this.response.catch((err) => forwarded.reject(err));
    return forwarded.promise;
  }

  async finish(fields: { elder: string; purpose?: string }): Promise<fileintakev1.SubmitFileResponse> {
    await this.forwarded;
    this.trailer.resolve({ elderAddress: fields.elder, purpose: fields.purpose });
    return this.response!;
  }

  cancel(reason: unknown): void {
    this.trailer.reject(reason);
    this.abort.abort(reason);
  }
}

const modeOf = (ctx: GatewayContext) => modeToProto(ctx.state.principal!.mode);

export interface FileRouteSettings {
  ADDRESS_DOMAIN: string;
  MAX_FILE_BYTES: number;
  UPLOAD_CONCURRENCY_PER_PARTNER: number;
  UPLOAD_CONCURRENCY_TOTAL: number;
  UPLOAD_MIN_BYTES_PER_SECOND: number;
  UPLOAD_RATE_WINDOW_SECONDS: number;
}

/** A partner, or this instance, at its cap of uploads in flight: retry after a second. */
const tooManyUploads = () => new PartnerError("rate_limited", { headers: { "Retry-After": "1" } });

/**
 * Rejects with 408 once a window of the request brings fewer bytes than the minimum rate (counted
 * on the socket, so the parts before the file count as much as the file); never resolves.
 */
function watchTransferRate(req: IncomingMessage, settings: FileRouteSettings): { stalled: Promise<never>; stop(): void } {
  const windowMs = settings.UPLOAD_RATE_WINDOW_SECONDS * 1000;
  const bytesRead = () => req.socket?.bytesRead ?? 0;
  const rate = new TransferRate(settings.UPLOAD_MIN_BYTES_PER_SECOND, windowMs, bytesRead());
  let timer: NodeJS.Timeout | undefined;
  const stalled = new Promise<never>((_resolve, reject) => {
    timer = setInterval(() => {
      if (rate.windowEnded(bytesRead())) return;
      clearInterval(timer);
      reject(new PartnerError("request_timeout", { headers: { Connection: "close" } }));
    }, windowMs);
  });
  stalled.catch(() => {});
  return { stalled, stop: () => clearInterval(timer) };
}

/** pi_files_accepted_total and pi_files_refused_total{code}: each upload's answer, the error's code when refused. */
const countUploads: Middleware = async (ctx, next) => {
  try {
    await next();
    if (ctx.status === 202) filesAccepted.inc();
  } catch (err) {
    filesRefused.inc({ code: partnerErrorFromInternal(err).code });
    throw err;
  }
};

export default function fileRoutes(files: FileIntakeClient, settings: FileRouteSettings, terminal = new TerminalStatusCache()) {
  const router = gatewayRouter();
  const domain = settings.ADDRESS_DOMAIN;
  const slots = new UploadSlots(settings.UPLOAD_CONCURRENCY_PER_PARTNER, settings.UPLOAD_CONCURRENCY_TOTAL);
  const limits = {
    fileSize: settings.MAX_FILE_BYTES,
    files: 1,
    fields: 2,
    parts: 3,
    fieldSize: MAX_FIELD_BYTES,
    fieldNameSize: 100,
    headerPairs: 100,
  };

  router.post("/v1/files", requireScope(FILES_SCOPE), countUploads, async (ctx) => {
    if (!ctx.is("multipart/form-data")) throw new PartnerError("unsupported_media_type", { message: "The body must be multipart/form-data." });
    const idempotencyKey = parseIdempotencyKey(ctx.req.headers["idempotency-key"]);
    const principal = ctx.state.principal!;
    // The body is at most this long, so the file too; unknown when the body is chunked.
    const declaredBytes = ctx.request.length === undefined ? undefined : BigInt(ctx.request.length);
    const header: SubmitHeader = { partnerId: principal.partnerId, mode: modeOf(ctx), idempotencyKey, declaredBytes };
    const release = slots.tryTake(principal.partnerId);
    if (!release) throw tooManyUploads();
    try {
      const quota = await files.checkStorageQuota({ partnerId: header.partnerId, mode: header.mode, declaredBytes });
      if (!quota.fits) throw storageQuotaExceeded(quota.retryAfterSeconds);
    } catch (err) {
      release();
      throw partnerErrorFromInternal(err);
    }
    const rate = watchTransferRate(ctx.req, settings);

    let submission: Submission | undefined;
    const storage: multer.StorageEngine = {
      _handleFile(req: IncomingMessage, file: multer.File, done: (error?: unknown, info?: Partial<multer.File>) => void) {
        try {
          // The fields that came before the file are checked before a byte of it is read.
          checkFields((req as IncomingMessage & { body?: unknown }).body, domain, false);
        } catch (err) {
          return done(err);
        }
        const stream = (file as multer.File & { stream: Readable }).stream;
        submission = new Submission(files, header, stream, settings.MAX_FILE_BYTES);
        submission.forwarded.then(
          (size) => done(null, { size }),
          (err) => done(err),
        );
      },
      _removeFile(_req: IncomingMessage, _file: multer.File, done: (error: Error | null) => void) {
        submission?.cancel(new Error("upload refused"));
        done(null);
      },
    } as multer.StorageEngine;

    try {
      await Promise.race([multer({ storage, limits }).single("file")(ctx, async () => {}), rate.stalled]);
      rate.stop();
      const fields = checkFields(ctx.request.body, domain, true);
      if (!submission) throw invalid("file is required (a file part with a filename).", "file");
      // file-intake holds a "no active connection" for a fixed time (services/file-intake/src/no-oracle.ts);
      // errors.ts gives it one body and one set of headers whatever the reason.
      const res = await submission.finish({ elder: fields.elder!, purpose: fields.purpose });
      ctx.status = 202;
      ctx.body = fileResource(res.file);
    } catch (err) {
      submission?.cancel(err);
      if (err instanceof PartnerError && err.code === "request_timeout") {
        // A stalled body is not parsed any further: what still arrives is dropped, and the socket
        // closes once the answer is out.
        ctx.req.unpipe();
        ctx.req.resume();
      }
      throw uploadError(err);
    } finally {
      rate.stop();
      release();
    }
  });

  router.get("/v1/files/:id", requireScope(FILES_SCOPE), async (ctx) => {
    const id = ctx.params.id ?? "";
    // A malformed id is as unknown as any other: the same 404, without asking file-intake.
    if (!FILE_ID.test(id)) throw new PartnerError("not_found");
    const { partnerId, mode } = ctx.state.principal!;
    // Only this partner's own file, in this mode, read earlier as processed or failed, is found here.
    const known = terminal.get(partnerId, mode, id);
    if (known) {
      ctx.body = { id, status: known };
      return;
    }
    const res = await files.getFile({ partnerId, id, mode: modeOf(ctx) });
    const resource = fileResource(res.file);
    if (resource.id === id) terminal.remember(partnerId, mode, id, resource.status);
    ctx.body = resource;
  });

  return router;
}
