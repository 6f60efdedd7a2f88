import type { IncomingMessage } from "node:http";
import type { Readable } from "node:stream";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { fileintakev1 } from "@pi/proto";
import { every } from "@pi/common/background/periodic";
import { recognise, SNIFF_BYTES, TEXT_MEDIA_TYPE, TextChecker } from "@pi/common/media-types";
import type { FileIntakeClient } from "@pi/common/clients";
import type { Logger } from "@pi/common/logger";
import { PartnerError } from "./errors.js";
import { TransferRate } from "./upload-guards.js";
import { invalid } from "./upload-request.js";

// The file part of an upload on its way to file-intake, and the watchdog on the request's rate.

/** One upload may take this long from its first byte to its answer (a slow link at 25 MB). */
export const UPLOAD_TIMEOUT_MS = 10 * 60_000;
/**
 * Bytes of the file per message to file-intake: every message costs both sides the same work
 * whatever its size (its framing, protobuf, Connect's stream plumbing), so chunks are gathered
 * (one copy, into a buffer each upload reuses) rather than sent one by one; at most this much of
 * an upload waits in the gateway.
 */
export const MESSAGE_BYTES = 256 * 1024;

type SubmitRequest = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
export type SubmitHeader = MessageInitShape<typeof fileintakev1.SubmitFileHeaderSchema>;
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
        // The multipart parser hands over chunks as the socket delivers them (64 KiB at most), each
        // checked as it comes and copied into the upload's one message buffer, so the socket's
        // buffers die young. The buffer is reused: the client serialises (copies) a message before
        // it asks for the next one, and writes one at a time.
        const message = Buffer.allocUnsafe(MESSAGE_BYTES);
        let filled = 0;
        for (let chunk: Buffer | undefined = checked(headBuffer); chunk; ) {
          for (let at = 0; at < chunk.length; ) {
            const take = Math.min(MESSAGE_BYTES - filled, chunk.length - at);
            message.set(chunk.subarray(at, at + take), filled);
            filled += take;
            at += take;
            if (filled === MESSAGE_BYTES) {
              yield { part: { case: "chunk", value: message } };
              filled = 0;
            }
          }
          const next = ended ? undefined : await chunks.next();
          chunk = next && !next.done ? checked(counted(next.value)) : undefined;
        }
        if (filled > 0) yield { part: { case: "chunk", value: message.subarray(0, filled) } };
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
    this.response = this.client.submitFile(requests(this.header), {
      signal: abort.signal,
      timeoutMs: UPLOAD_TIMEOUT_MS,
    });
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

/**
 * Rejects with 408 once a window of the request brings fewer bytes than the minimum rate (counted
 * on the socket, so the parts before the file count as much as the file); never resolves.
 */
export function watchTransferRate(
  req: IncomingMessage,
  settings: { UPLOAD_MIN_BYTES_PER_SECOND: number; UPLOAD_RATE_WINDOW_SECONDS: number },
  logger: Logger,
): { stalled: Promise<never>; stop(): void } {
  const windowMs = settings.UPLOAD_RATE_WINDOW_SECONDS * 1000;
  const bytesRead = () => req.socket?.bytesRead ?? 0;
  const rate = new TransferRate(settings.UPLOAD_MIN_BYTES_PER_SECOND, windowMs, bytesRead());
  let stop = () => {};
  const stalled = new Promise<never>((_resolve, reject) => {
    const watch = every(
      "upload transfer rate",
      windowMs,
      async () => {
        if (rate.windowEnded(bytesRead())) return;
        stop();
        reject(new PartnerError("request_timeout", { headers: { Connection: "close" } }));
      },
      logger,
      { runAtStart: false },
    );
    stop = () => void watch.stop();
  });
  stalled.catch(() => {});
  return { stalled, stop: () => stop() };
}
