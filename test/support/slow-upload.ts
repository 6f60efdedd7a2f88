import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { request as httpsRequest } from "node:https";
import { randomBytes } from "node:crypto";

// An upload whose body arrives at a pace the test sets: to watch the gateway's bounds on uploads
// (docs/files.md, "Bounds on uploads") from outside, as a slow or hostile partner would drive it.

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
}

/**
 * POST /v1/files with `elder`, then a text file of which `bytesPerTick` bytes are sent every
 * `tickMs` until `finish()` or the gateway answers. Each upload has a socket of its own.
 */
export function pacedUpload(baseUrl: string, token: string, elder: string, pace: { bytesPerTick: number; tickMs: number }): PacedUpload {
  const boundary = `----pi${randomBytes(12).toString("hex")}`;
  const head = Buffer.from(
    `--${boundary}\r\ncontent-disposition: form-data; name="elder"\r\n\r\n${elder}\r\n` +
      `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="notes.txt"\r\ncontent-type: text/plain\r\n\r\nCare notes.\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let done = false;
  // HTTPS through a cluster's ingress (trusting what the process trusts: NODE_EXTRA_CA_CERTS).
  const request = baseUrl.startsWith("https:") ? httpsRequest : httpRequest;
  const req = request(`${baseUrl}/v1/files`, {
    method: "POST",
    agent: false,
    headers: { authorization: `Bearer ${token}`, "content-type": `multipart/form-data; boundary=${boundary}`, "transfer-encoding": "chunked" },
  });
  const answer = new Promise<UploadAnswer>((resolve, reject) => {
    req.on("response", (res) => {
      done = true;
      clearInterval(timer);
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString(), ms: performance.now() - started }));
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
  };
}
