import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { connect as http2Connect } from "node:http2";
import { randomBytes } from "node:crypto";

// An upload whose body arrives at a pace the test sets: to watch the gateway's bounds on uploads
// (docs/files.md, "Bounds on uploads") from outside, as a slow or hostile partner would drive it.
//
// Over plain HTTP (the gateway itself) it is HTTP/1.1. Over HTTPS (a cluster's ingress) it is
// HTTP/2, as ALPN offers it: there an answer that comes before the body has ended is delivered
// whatever the client does next, because the proxy ends the stream (RST_STREAM NO_ERROR after the
// response, RFC 9113 section 8.1) and not the connection. Over HTTP/1.1 the proxy can only close
// the connection with request bytes unread; its kernel then resets it, and a client whose next
// write of the body comes before it has read the answer (an event loop busy for a few tens of
// milliseconds is enough) gets EPIPE and never sees the answer that had already arrived.

export interface UploadAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** From the first byte sent to the answer's end. */
  ms: number;
}

export interface PacedUpload {
  /** Settles with the gateway's answer, whenever it comes (while the body is still being sent, too). */
  answer: Promise<UploadAnswer>;
  /** Sends the rest of the body at once, so a well-paced upload completes. */
  finish(): void;
  /** Stops sending and closes the connection (a test that failed leaves nothing dripping). */
  abort(): void;
}

/**
 * POST /v1/files with `elder`, then a text file of which `bytesPerTick` bytes are sent every
 * `tickMs` until `finish()` or the gateway answers. Each upload has a connection of its own.
 */
export function pacedUpload(
  baseUrl: string,
  token: string,
  elder: string,
  pace: { bytesPerTick: number; tickMs: number },
): PacedUpload {
  const boundary = `----pi${randomBytes(12).toString("hex")}`;
  const head = Buffer.from(
    `--${boundary}\r\ncontent-disposition: form-data; name="elder"\r\n\r\n${elder}\r\n` +
      `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="notes.txt"\r\ncontent-type: text/plain\r\n\r\nCare notes.\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const headers = { authorization: `Bearer ${token}`, "content-type": `multipart/form-data; boundary=${boundary}` };
  return baseUrl.startsWith("https:")
    ? overHttp2(baseUrl, headers, head, tail, pace)
    : overHttp1(baseUrl, headers, head, tail, pace);
}

type Pace = { bytesPerTick: number; tickMs: number };

function overHttp1(
  baseUrl: string,
  headers: Record<string, string>,
  head: Buffer,
  tail: Buffer,
  pace: Pace,
): PacedUpload {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let done = false;
  const req = httpRequest(`${baseUrl}/v1/files`, {
    method: "POST",
    agent: false,
    headers: { ...headers, "transfer-encoding": "chunked" },
  });
  const answer = new Promise<UploadAnswer>((resolve, reject) => {
    req.on("response", (res) => {
      done = true;
      clearInterval(timer);
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode!,
          headers: res.headers,
          body: Buffer.concat(chunks).toString(),
          ms: performance.now() - started,
        }),
      );
      res.on("error", reject);
    });
    req.on("error", (err) => {
      clearInterval(timer);
      if (!done) reject(err);
    });
  });
  req.write(head);
  timer = setInterval(() => {
    if (!done) req.write(Buffer.alloc(pace.bytesPerTick, "a"));
  }, pace.tickMs);
  return {
    answer,
    finish() {
      clearInterval(timer);
      if (!done) req.end(tail);
    },
    abort() {
      clearInterval(timer);
      done = true;
      req.destroy();
    },
  };
}

function overHttp2(
  baseUrl: string,
  headers: Record<string, string>,
  head: Buffer,
  tail: Buffer,
  pace: Pace,
): PacedUpload {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let answered = false;
  // Trusting what the process trusts (NODE_EXTRA_CA_CERTS); the name resolved as every client of the process resolves it.
  const session = http2Connect(new URL(baseUrl).origin);
  const stream = session.request({ ":method": "POST", ":path": "/v1/files", ...headers });
  const stop = () => {
    clearInterval(timer);
    session.close();
  };
  const answer = new Promise<UploadAnswer>((resolve, reject) => {
    let status = 0;
    let responseHeaders: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    let settled = false;
    const settle = (err?: Error) => {
      if (settled) return;
      settled = true;
      stop();
      if (answered)
        resolve({
          status,
          headers: responseHeaders,
          body: Buffer.concat(chunks).toString(),
          ms: performance.now() - started,
        });
      else reject(err ?? new Error(`the stream closed without an answer (RST_STREAM code ${stream.rstCode})`));
    };
    stream.on("response", (h) => {
      answered = true;
      clearInterval(timer);
      status = Number(h[":status"]);
      responseHeaders = Object.fromEntries(
        Object.entries(h).filter(([k]) => !k.startsWith(":")),
      ) as IncomingHttpHeaders;
    });
    stream.on("data", (c: Buffer) => chunks.push(c));
    // The answer's end; or, once the proxy has reset the stream after a complete answer, its close.
    stream.on("end", () => settle());
    stream.on("close", () => settle());
    stream.on("error", (err) => settle(err));
    session.on("error", (err) => settle(err));
  });
  const writable = () => !answered && !stream.destroyed && !stream.writableEnded;
  stream.write(head);
  timer = setInterval(() => {
    if (writable()) stream.write(Buffer.alloc(pace.bytesPerTick, "a"));
  }, pace.tickMs);
  return {
    answer,
    finish() {
      clearInterval(timer);
      if (writable()) stream.end(tail);
    },
    abort() {
      clearInterval(timer);
      stream.destroy();
      session.destroy();
    },
  };
}
