import type { IncomingMessage } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import type { Readable } from "node:stream";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { fileintakev1 } from "@pi/proto";
import { ErrorReason, reasonOf } from "@pi/common/rpc/errors";
import type { FileIntakeClient } from "@pi/common/rpc/clients";
import { PartnerError } from "./errors.js";

// The file part of an upload on its way to file-intake, and the watchdog on the request's rate.

/** One upload may take this long from its first byte to its answer (a slow link at 25 MB). */
export const UPLOAD_TIMEOUT_MS = 10 * 60_000;
/** Bytes per message to file-intake: every message costs the same whatever its size, so chunks are gathered. */
export const MESSAGE_BYTES = 256 * 1024;

type SubmitRequest = MessageInitShape<typeof fileintakev1.SubmitFileRequestSchema>;
export type SubmitHeader = MessageInitShape<typeof fileintakev1.SubmitFileHeaderSchema>;

function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

/** How long a refusal of the gateway's waits for file-intake's earlier verdict, if any. */
const VERDICT_WAIT_MS = 5_000;

/** file-intake's verdicts that win over the gateway's refusal of the body (docs/files.md, "Order of checks"). */
const EARLIER = new Set([
  ErrorReason.STORAGE_QUOTA_EXCEEDED,
  ErrorReason.STORE_FULL,
  ErrorReason.UNSUPPORTED_MEDIA_TYPE,
  ErrorReason.FILE_TOO_LARGE,
]);
const earlierVerdict = (err: unknown) => {
  const reason = reasonOf(err);
  return reason !== undefined && (EARLIER.has(reason.reason) || reason.param === "file");
};

/**
 * One upload on its way to file-intake, opened before a byte of the body is read: the header at
 * once, the file's bytes pulled as they arrive (flow control slows the partner when file-intake is
 * slower), the fields after the file part in the trailer. The gateway only counts the bytes (413).
 */
export class Submission {
  /** file-intake's answer; rejects as soon as file-intake refuses. */
  readonly response: Promise<fileintakev1.SubmitFileResponse>;
  private readonly file = deferred<Readable | undefined>();
  private readonly forwarded = deferred<number>();
  private readonly trailer = deferred<MessageInitShape<typeof fileintakev1.SubmitFileTrailerSchema>>();
  private readonly abort = new AbortController();
  private fileComplete = false;

  constructor(
    client: FileIntakeClient,
    header: SubmitHeader,
    private readonly maxBytes: number,
  ) {
    this.response = client.submitFile(this.requests(header), {
      signal: this.abort.signal,
      timeoutMs: UPLOAD_TIMEOUT_MS,
    });
    this.response.catch(() => {});
  }

  /** The file part has started: resolves with its byte count once it is forwarded whole. */
  forward(file: Readable): Promise<number> {
    this.file.resolve(file);
    return this.forwarded.promise;
  }

  /** After the body was read whole, the file part with it. */
  finish(fields: { elder: string; purpose?: string }): Promise<fileintakev1.SubmitFileResponse> {
    this.trailer.resolve({ elderAddress: fields.elder, purpose: fields.purpose });
    return this.response;
  }

  /** The gateway refused the body with `err`: file-intake's earlier verdict if it has one, else `err`. */
  async refuse(err: unknown): Promise<unknown> {
    this.file.resolve(undefined);
    this.trailer.resolve({ elderAddress: "", refused: true, fileComplete: this.fileComplete });
    // Bounded: a file-intake that does not answer leaves the gateway's own refusal.
    const verdict = await Promise.race([
      this.response.then(
        () => undefined,
        (e: unknown) => e,
      ),
      sleep(VERDICT_WAIT_MS, undefined, { signal: this.abort.signal }).catch(() => undefined),
    ]);
    this.abort.abort(err); // the wait's timer too
    return earlierVerdict(verdict) ? verdict : err;
  }

  cancel(reason: unknown): void {
    this.trailer.reject(reason);
    this.abort.abort(reason);
  }

  private async *requests(header: SubmitHeader): AsyncGenerator<SubmitRequest> {
    yield { part: { case: "header", value: header } };
    const file = await this.file.promise;
    if (file) {
      try {
        const size = yield* this.chunks(file);
        this.fileComplete = true;
        this.forwarded.resolve(size);
      } catch (err) {
        this.forwarded.reject(err);
      }
    }
    yield { part: { case: "trailer", value: await this.trailer.promise } };
  }

  /** The file's chunks, copied into one reused message buffer (the client serialises a message before the next). */
  private async *chunks(file: Readable): AsyncGenerator<SubmitRequest, number> {
    const message = Buffer.allocUnsafe(MESSAGE_BYTES);
    let filled = 0;
    let size = 0;
    for await (const chunk of file as AsyncIterable<Buffer>) {
      size += chunk.length;
      // The multipart parser hands over MAX_FILE_BYTES + 1 bytes at most; the last is never sent on.
      if (size > this.maxBytes) throw new PartnerError("file_too_large", { param: "file" });
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
    }
    if (filled > 0) yield { part: { case: "chunk", value: message.subarray(0, filled) } };
    return size;
  }
}

/**
 * Rejects with 408 once a window brings fewer bytes (on the socket) than the minimum rate; never
 * resolves. Each window is judged on its own, so an early burst does not pay for a later stall.
 */
export function watchTransferRate(
  req: IncomingMessage,
  settings: { UPLOAD_MIN_BYTES_PER_SECOND: number; UPLOAD_RATE_WINDOW_SECONDS: number },
): { stalled: Promise<never>; stop(): void } {
  const bytesRead = () => req.socket?.bytesRead ?? 0;
  let windowStart = bytesRead();
  const stalled = deferred<never>();
  const watch = setInterval(() => {
    const arrived = bytesRead() - windowStart;
    windowStart += arrived;
    if (arrived >= settings.UPLOAD_MIN_BYTES_PER_SECOND * settings.UPLOAD_RATE_WINDOW_SECONDS) return;
    clearInterval(watch);
    stalled.reject(new PartnerError("request_timeout", { headers: { Connection: "close" } }));
  }, settings.UPLOAD_RATE_WINDOW_SECONDS * 1000);
  return { stalled: stalled.promise, stop: () => clearInterval(watch) };
}
