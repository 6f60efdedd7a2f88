import { constants, createInflate } from "node:zlib";

// The decoded-size limit of a PDF, checked before pdf.js sees the file: a FlateDecode "bomb" (a few
// KB that inflate to gigabytes) would otherwise be inflated by pdf.js into one growing buffer,
// outside the JS heap that the worker's resourceLimits bound. Every stream whose data is zlib is
// inflated here with the output counted and thrown away (kept only when it is zlib again, for
// chained /FlateDecode filters); the sum over the file must stay within the limit.

export class DecodedSizeExceeded extends Error {
  constructor(limit: number) {
    super(`streams decode to more than ${limit} bytes`);
    this.name = "DecodedSizeExceeded";
  }
}

const MAX_NESTING = 3;
const STREAM = Buffer.from("stream", "latin1");
const END = Buffer.from("endstream", "latin1");

/** A zlib header (RFC 1950): deflate method and a valid check; what pdf.js's FlateStream accepts. */
function isZlib(bytes: Uint8Array): boolean {
  return bytes.length >= 2 && (bytes[0]! & 0x0f) === 8 && ((bytes[0]! << 8) | bytes[1]!) % 31 === 0;
}

/** The data of every `stream … endstream` in the file (the keyword's end of line skipped). */
function* streamBodies(pdf: Buffer): Generator<Buffer> {
  for (let at = pdf.indexOf(STREAM); at !== -1; at = pdf.indexOf(STREAM, at + STREAM.length)) {
    if (at >= 3 && pdf.toString("latin1", at - 3, at) === "end") continue;
    let start = at + STREAM.length;
    if (pdf[start] === 0x0d) start++;
    if (pdf[start] === 0x0a) start++;
    const end = pdf.indexOf(END, start);
    yield pdf.subarray(start, end === -1 ? pdf.length : end);
  }
}

/** Bytes `data` inflates to (at every nesting level), or DecodedSizeExceeded past `budget`. */
function inflatedSize(data: Uint8Array, budget: number, limit: number, depth = 1): Promise<number> {
  return new Promise((resolve, reject) => {
    // Z_SYNC_FLUSH: a truncated stream counts what it gives, as pdf.js decodes what it can.
    const inflate = createInflate({ finishFlush: constants.Z_SYNC_FLUSH, chunkSize: 1 << 20 });
    let size = 0;
    let kept: Buffer[] | undefined;
    inflate.on("data", (chunk: Buffer) => {
      if (size === 0 && depth < MAX_NESTING && isZlib(chunk)) kept = [];
      size += chunk.length;
      if (size > budget) {
        inflate.destroy();
        reject(new DecodedSizeExceeded(limit));
        return;
      }
      kept?.push(chunk);
    });
    // Damaged data: pdf.js stops there too; what inflated so far is counted.
    inflate.on("error", () => resolve(size));
    inflate.on("end", () => {
      if (!kept) return resolve(size);
      inflatedSize(Buffer.concat(kept), budget - size, limit, depth + 1).then((inner) => resolve(size + inner), reject);
    });
    inflate.end(data);
  });
}

/** Throws DecodedSizeExceeded when the zlib streams of `pdf` decode to more than `limit` bytes. */
export async function checkDecodedSize(pdf: Uint8Array, limit: number): Promise<number> {
  const bytes = Buffer.from(pdf.buffer, pdf.byteOffset, pdf.byteLength);
  let total = 0;
  for (const body of streamBodies(bytes)) {
    if (!isZlib(body)) continue;
    total += await inflatedSize(body, limit - total, limit);
  }
  return total;
}
