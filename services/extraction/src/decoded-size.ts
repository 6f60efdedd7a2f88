import { constants, createInflate } from "node:zlib";
import { isWhite, MalformedStream, pdfStreams, type Work } from "./pdf-streams.js";

// The decoded-size limits of a PDF, checked before pdf.js sees the file, so a bomb (a few KB that
// decode to gigabytes) or a page of millions of operators costs nothing. Every stream but an image
// is decoded through the filter chain of its own dictionary (pdf-streams.ts), each stage's output
// counted and kept only when another filter follows. The sum must stay within one limit, and each
// stream but a font within another; image filters end a chain. What cannot be decoded (encrypted,
// a /Filter by reference) counts its stored length and is bounded by the child's memory ceiling.

export class DecodedSizeExceeded extends Error {
  constructor(limit: number, what = "streams decode", message = `${what} to more than ${limit} bytes`) {
    super(message);
    this.name = "DecodedSizeExceeded";
  }
}

type Filter = "flate" | "lzw" | "hex" | "a85" | "rl" | "image";
const FILTERS: Record<string, Filter> = {
  FlateDecode: "flate",
  Fl: "flate",
  LZWDecode: "lzw",
  LZW: "lzw",
  ASCIIHexDecode: "hex",
  AHx: "hex",
  ASCII85Decode: "a85",
  A85: "a85",
  RunLengthDecode: "rl",
  RL: "rl",
  DCTDecode: "image",
  DCT: "image",
  JPXDecode: "image",
  CCITTFaxDecode: "image",
  CCF: "image",
  JBIG2Decode: "image",
};

/** The filter chain of a stream's dictionary; null when it cannot be read (a reference, an unknown filter). */
export function chainOf(filters: string[] | null): Filter[] | null {
  if (!filters) return null;
  const chain = filters.map((n) => FILTERS[n]);
  return chain.every((f) => f !== undefined) ? (chain as Filter[]) : null;
}

const FONT_SUBTYPES = new Set(["Type1C", "CIDFontType0C", "OpenType"]);

/** Counts the bytes decoded against the file's budget and the stream's. */
class Budget {
  used = 0;
  private stream = 0;
  private streamLimit = Infinity;
  constructor(
    readonly limit: number,
    readonly perStream: number,
  ) {}
  /** A new stream: its own count starts at 0 (a font's is not bounded on its own). */
  next(font: boolean) {
    this.stream = 0;
    this.streamLimit = font ? Infinity : this.perStream;
  }
  spend(n: number) {
    this.used += n;
    this.stream += n;
    if (this.used > this.limit) throw new DecodedSizeExceeded(this.limit);
    if (this.stream > this.streamLimit) throw new DecodedSizeExceeded(this.perStream, "a stream decodes");
  }
}

const CHUNK = 1 << 20;

/** A decoder's output: counted, and kept only for a next filter; single bytes gathered a MiB at a time. */
class Sink {
  private readonly parts: Buffer[] = [];
  private out: Buffer | undefined;
  private n = 0;
  constructor(
    private readonly budget: Budget,
    private readonly keep: boolean,
  ) {}
  push(chunk: Buffer) {
    this.budget.spend(chunk.length);
    if (this.keep) this.parts.push(chunk);
  }
  byte(b: number) {
    this.out ??= Buffer.allocUnsafe(CHUNK);
    this.out[this.n++] = b;
    if (this.n === CHUNK) this.flush();
  }
  flush() {
    if (this.out) this.push(this.out.subarray(0, this.n));
    this.out = undefined;
    this.n = 0;
  }
  bytes(): Buffer {
    return Buffer.concat(this.parts);
  }
}

function inflate(data: Buffer, sink: Sink): Promise<void> {
  return new Promise((resolve, reject) => {
    // Z_SYNC_FLUSH: a truncated stream counts what it gives, as pdf.js decodes what it can.
    const inflater = createInflate({ finishFlush: constants.Z_SYNC_FLUSH, chunkSize: CHUNK });
    inflater.on("data", (chunk: Buffer) => {
      try {
        sink.push(chunk);
      } catch (err) {
        inflater.destroy();
        reject(err);
      }
    });
    // Damaged data: pdf.js stops there too; what was decoded so far is counted.
    inflater.on("error", () => resolve());
    inflater.on("end", () => resolve());
    inflater.end(data);
  });
}

function asciiHex(data: Buffer, sink: Sink) {
  let high = -1;
  for (const c of data) {
    if (c === 0x3e) break; // '>'
    const v =
      c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x41 && c <= 0x46 ? c - 0x37 : c >= 0x61 && c <= 0x66 ? c - 0x57 : -1;
    if (v < 0) continue;
    if (high < 0) high = v;
    else {
      sink.byte((high << 4) | v);
      high = -1;
    }
  }
  if (high >= 0) sink.byte(high << 4);
}

function ascii85(data: Buffer, sink: Sink) {
  const emit = (v: number, count = 4) => {
    for (let k = 0; k < count; k++) sink.byte((v >>> (24 - 8 * k)) & 0xff);
  };
  const group: number[] = [];
  for (const c of data) {
    if (c === 0x7e) break; // '~>'
    if (isWhite(c)) continue;
    if (c === 0x7a && group.length === 0) {
      emit(0); // 'z'
      continue;
    }
    if (c < 0x21 || c > 0x75) break;
    group.push(c - 0x21);
    if (group.length === 5) {
      emit(group.reduce((a, d) => a * 85 + d, 0) >>> 0);
      group.length = 0;
    }
  }
  if (group.length > 1) {
    const k = group.length;
    while (group.length < 5) group.push(84);
    emit(group.reduce((a, d) => a * 85 + d, 0) >>> 0, k - 1);
  }
}

function runLength(data: Buffer, sink: Sink) {
  const parts: Buffer[] = [];
  let size = 0;
  const flush = () => {
    if (parts.length) sink.push(Buffer.concat(parts));
    parts.length = 0;
    size = 0;
  };
  for (let i = 0; i < data.length; ) {
    const len = data[i++]!;
    if (len === 128) break;
    const literal = len < 128;
    const part = literal ? data.subarray(i, i + len + 1) : Buffer.alloc(257 - len, data[i] ?? 0);
    i += literal ? len + 1 : 1;
    parts.push(part);
    size += part.length;
    if (size >= CHUNK) flush();
  }
  flush();
}

/** LZW as PDF has it (EarlyChange 1, the default). */
function lzw(data: Buffer, sink: Sink) {
  const prefix = new Int32Array(4096);
  const suffix = new Uint8Array(4096);
  const head = new Uint8Array(4096); // each code's first byte
  for (let i = 0; i < 256; i++) {
    suffix[i] = i;
    prefix[i] = -1;
    head[i] = i;
  }
  let next = 258;
  let width = 9;
  let previous = -1;
  let bits = 0;
  let acc = 0;
  const stack = new Uint8Array(4096);
  const first = (code: number) => head[code]!;
  const define = (code: number, last: number) => {
    prefix[next] = code;
    suffix[next] = last;
    head[next] = head[code]!;
    next++;
  };
  const write = (code: number) => {
    let k = 0;
    for (let c = code; c >= 0; c = prefix[c]!) stack[k++] = suffix[c]!;
    while (k > 0) sink.byte(stack[--k]!);
  };
  for (let i = 0; i < data.length; i++) {
    acc = ((acc << 8) | data[i]!) & 0xffffff;
    bits += 8;
    while (bits >= width) {
      const code = (acc >>> (bits - width)) & ((1 << width) - 1);
      bits -= width;
      if (code === 256) {
        next = 258;
        width = 9;
        previous = -1;
        continue;
      }
      if (code === 257) return;
      if (previous < 0) {
        if (code > 255) break;
        write(code);
      } else if (code < next) {
        write(code);
        if (next < 4096) define(previous, first(code));
      } else if (code === next && next < 4096) {
        define(previous, first(previous));
        write(code);
      } else return; // damaged
      previous = code;
      if (next + 1 >= 1 << width && width < 12) width++;
    }
  }
}

const DECODERS: Record<Exclude<Filter, "image">, (data: Buffer, sink: Sink) => void | Promise<void>> = {
  flate: inflate,
  hex: asciiHex,
  a85: ascii85,
  rl: runLength,
  lzw,
};

/**
 * What the streams of `pdf` decode to; throws DecodedSizeExceeded past `limit` in all, past
 * `perStream` for one (but a font), or when a stream cannot be told apart (MalformedStream).
 */
export async function checkDecodedSize(
  pdf: Uint8Array,
  limit: number,
  perStream = limit,
  work: Work = { bytes: 0 },
): Promise<number> {
  const bytes = Buffer.from(pdf.buffer, pdf.byteOffset, pdf.byteLength);
  const budget = new Budget(limit, perStream);
  let fed = 0;
  try {
    for (const { dict, start, end } of pdfStreams(bytes, work)) {
      // Text extraction never decodes an image.
      if (dict.subtype === "Image") continue;
      budget.next(dict.length1 || (dict.subtype !== undefined && FONT_SUBTYPES.has(dict.subtype)));
      const body = bytes.subarray(start, end);
      const filters = chainOf(dict.filters);
      if (!filters || filters.length === 0 || filters[0] === "image") {
        budget.spend(body.length);
        continue;
      }
      // Streams may overlap (an object inside another's data): what the decoders read stays linear in the file.
      fed += body.length;
      if (fed > 2 * bytes.length)
        throw new DecodedSizeExceeded(
          limit,
          undefined,
          "streams overlap: what they decode to cannot be measured in one pass",
        );
      let data = body;
      for (let i = 0; i < filters.length; i++) {
        const filter = filters[i]!;
        if (filter === "image") break;
        const last = i === filters.length - 1 || filters[i + 1] === "image";
        const sink = new Sink(budget, !last);
        await DECODERS[filter](data, sink);
        sink.flush();
        if (last) break;
        data = sink.bytes();
      }
    }
  } catch (err) {
    if (err instanceof MalformedStream)
      throw new DecodedSizeExceeded(limit, undefined, `${err.message}: what its streams decode to cannot be measured`);
    throw err;
  }
  return budget.used;
}
