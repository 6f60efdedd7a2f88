// The streams of a PDF for decoded-size.ts, in one forward pass linear in the file's size (`Work`
// counts the bytes examined). A stream is `N G obj << dict >> stream … endstream`: its dictionary is
// the object value between the last `obj` keyword and `stream`, lexed as PDF so only its own
// top-level entries count; its data ends at a direct /Length followed by `endstream`, else at the
// next `endstream`. A `stream` keyword whose dictionary cannot be found is MalformedStream: pdf.js
// might still read a stream there, and what this pass cannot see it cannot measure.

export class MalformedStream extends Error {
  constructor(at: number, why: string) {
    super(`the stream keyword at byte ${at} ${why}`);
    this.name = "MalformedStream";
  }
}

/** The entries of a stream's dictionary that the checks need (its top level only). */
export interface StreamDict {
  /** /Filter's names; null when given otherwise (by reference). */
  filters: string[] | null;
  /** /Length when it is a direct integer. */
  length: number | undefined;
  subtype: string | undefined;
  /** Whether /Length1 is present (a font program). */
  length1: boolean;
}

export interface PdfStream {
  dict: StreamDict;
  /** The data: [start, end) of the file. */
  start: number;
  end: number;
  /** false when no `endstream` closes it. */
  terminated: boolean;
}

/** Bytes examined so far. */
export interface Work {
  bytes: number;
}

const STREAM = Buffer.from("stream", "latin1");
const ENDSTREAM = Buffer.from("endstream", "latin1");
const OBJ = Buffer.from("obj", "latin1");
const MAX_DEPTH = 64;
/** How far back a `stream` keyword's dictionary end is looked for (white space and comments). */
const WINDOW = 256;
/** The `%` of one line tried as a comment's start before a keyword is taken to follow a dictionary. */
const MAX_COMMENT_STARTS = 4;
/** How often one object header's value may be lexed (for different keywords); a real object needs one or two. */
const MAX_LEXES_PER_HEADER = 4;
/** The newest object headers tried for a keyword inside the newest one's value. */
const HEADERS_TRIED = 4;
/** White space between a stream's data and `endstream` (an end of line, some producers' two). */
const MAX_EOL = 16;

/** 1: white space, 2: a delimiter, 0: a byte that continues a name, number or keyword. */
const CLASS = new Uint8Array(256);
for (const c of Buffer.from(" \n\r\t\f\0", "latin1")) CLASS[c] = 1;
for (const c of Buffer.from("()<>[]{}/%", "latin1")) CLASS[c] = 2;
export const isWhite = (c: number | undefined) => c !== undefined && CLASS[c] === 1;
/** End of file is not regular. */
const isRegular = (c: number | undefined) => c !== undefined && CLASS[c] === 0;
const isDigit = (c: number | undefined) => c !== undefined && c >= 0x30 && c <= 0x39;

type Value =
  | { kind: "int"; n: number }
  | { kind: "name"; name: string }
  | { kind: "array"; items: Value[] }
  | { kind: "ref" }
  | { kind: "other" };

class Fail extends Error {}

/** A PDF lexer over [pos, limit) of `pdf`, one object value at a time. */
class Lexer {
  constructor(
    private readonly pdf: Buffer,
    public pos: number,
    private readonly limit: number,
  ) {}

  private peek(offset = 0): number | undefined {
    const at = this.pos + offset;
    return at < this.limit ? this.pdf[at] : undefined;
  }

  /** White space and comments. */
  skipWhite(): void {
    while (this.pos < this.limit) {
      const c = this.pdf[this.pos]!;
      if (isWhite(c)) this.pos++;
      else if (c === 0x25) {
        while (this.pos < this.limit && this.pdf[this.pos] !== 0x0a && this.pdf[this.pos] !== 0x0d) this.pos++;
      } else break;
    }
  }

  private regularRun(): string {
    const from = this.pos;
    while (isRegular(this.peek())) this.pos++;
    return this.pdf.toString("latin1", from, this.pos);
  }

  private name(): string {
    this.pos++; // '/'
    return this.regularRun().replace(/#([0-9a-fA-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
  }

  private literalString(): void {
    this.pos++; // '('
    let depth = 1;
    while (this.pos < this.limit) {
      const c = this.pdf[this.pos++]!;
      if (c === 0x5c)
        this.pos++; // '\': the next byte is escaped
      else if (c === 0x28) depth++;
      else if (c === 0x29 && --depth === 0) return;
    }
    throw new Fail();
  }

  private hexString(): void {
    const end = this.pdf.subarray(this.pos, this.limit).indexOf(0x3e);
    if (end === -1) throw new Fail();
    this.pos += end + 1;
  }

  /** The integer here, if there is one (the position unchanged otherwise). */
  private integer(): number | undefined {
    const from = this.pos;
    while (isDigit(this.peek())) this.pos++;
    if (this.pos === from || isRegular(this.peek())) {
      this.pos = from;
      return undefined;
    }
    return Number(this.pdf.toString("latin1", from, this.pos));
  }

  value(depth: number): Value {
    if (depth > MAX_DEPTH) throw new Fail();
    this.skipWhite();
    const c = this.peek();
    if (c === undefined) throw new Fail();
    if (c === 0x3c) {
      if (this.peek(1) === 0x3c) {
        this.dict(depth + 1, undefined);
        return { kind: "other" };
      }
      this.hexString();
      return { kind: "other" };
    }
    if (c === 0x28) {
      this.literalString();
      return { kind: "other" };
    }
    if (c === 0x2f) return { kind: "name", name: this.name() };
    if (c === 0x5b) {
      this.pos++;
      const items: Value[] = [];
      for (;;) {
        this.skipWhite();
        if (this.peek() === undefined) throw new Fail();
        if (this.peek() === 0x5d) {
          this.pos++;
          return { kind: "array", items };
        }
        items.push(this.value(depth + 1));
      }
    }
    if (c === 0x7b || c === 0x7d) {
      this.pos++;
      return { kind: "other" };
    }
    if (isDigit(c)) {
      const n = this.integer();
      if (n !== undefined) {
        // `N G R`: a reference.
        const after = this.pos;
        this.skipWhite();
        if (this.integer() !== undefined) {
          this.skipWhite();
          if (this.peek() === 0x52 && !isRegular(this.peek(1))) {
            this.pos++;
            return { kind: "ref" };
          }
        }
        this.pos = after;
        return { kind: "int", n };
      }
    }
    if (!isRegular(c)) throw new Fail(); // ')' or '>' out of place
    this.regularRun(); // a real number, true, false, null, or another keyword
    return { kind: "other" };
  }

  /** A dictionary from `<<` to its `>>`; its entries go to `entries` (the top level only). */
  dict(depth: number, entries: Map<string, Value> | undefined): void {
    this.pos += 2; // '<<'
    for (;;) {
      this.skipWhite();
      const c = this.peek();
      if (c === undefined) throw new Fail();
      if (c === 0x3e) {
        if (this.peek(1) !== 0x3e) throw new Fail();
        this.pos += 2;
        return;
      }
      if (c !== 0x2f) {
        // As pdf.js does: what is not a name where a key should be is skipped.
        if (c === 0x5d || c === 0x29 || c === 0x7d || c === 0x3e) this.pos++;
        else this.value(depth);
        continue;
      }
      const key = this.name();
      const value = this.value(depth);
      entries?.set(key, value);
    }
  }
}

function dictOf(entries: Map<string, Value>): StreamDict {
  const filter = entries.get("Filter");
  let filters: string[] | null;
  if (filter === undefined) filters = [];
  else if (filter.kind === "name") filters = [filter.name];
  else if (filter.kind === "array" && filter.items.every((f) => f.kind === "name"))
    filters = filter.items.map((f) => (f as { name: string }).name);
  else filters = null;
  const length = entries.get("Length");
  const subtype = entries.get("Subtype");
  return {
    filters,
    length: length?.kind === "int" ? length.n : undefined,
    subtype: subtype?.kind === "name" ? subtype.name : undefined,
    length1: entries.has("Length1"),
  };
}

/** The last backward search for a `%` or a line break (-1: none); later searches stop where it began. */
interface LineScan {
  from: number;
  found: number;
}

/**
 * Whether the `stream` keyword at `at` follows `>>` (white space and comments between): pdf.js makes
 * a stream only there. Past WINDOW bytes or MAX_COMMENT_STARTS tries, yes (the caller checks the object).
 */
function followsDictionary(pdf: Buffer, at: number, work: Work, last: LineScan): boolean {
  const floor = Math.max(0, at - WINDOW);
  let p = at - 1;
  for (let tries = 0; ; tries++) {
    while (p >= floor && isWhite(pdf[p])) p--;
    if (p <= floor) {
      work.bytes += at - floor;
      return floor > 0;
    }
    if (pdf[p] === 0x3e && pdf[p - 1] === 0x3e) break;
    if (tries === MAX_COMMENT_STARTS) {
      work.bytes += at - p;
      return true;
    }
    let q = p;
    while (q >= floor && pdf[q] !== 0x0a && pdf[q] !== 0x0d && pdf[q] !== 0x25) {
      if (q === last.from) {
        q = last.found;
        break;
      }
      q--;
    }
    if (tries === 0) {
      last.from = p;
      last.found = q;
    }
    if (q < floor) {
      work.bytes += at - floor;
      return floor > 0;
    }
    if (pdf[q] !== 0x25) {
      work.bytes += at - q;
      return false;
    }
    p = q - 1;
  }
  work.bytes += at - p;
  return true;
}

/** The value after the object header at `objAt`: its dictionary if it ends right at `at`; "inside" when `at` is in it. */
function dictionaryEndingAt(pdf: Buffer, objAt: number, at: number, work: Work): StreamDict | "inside" | undefined {
  const lexer = new Lexer(pdf, objAt + OBJ.length, at);
  try {
    lexer.skipWhite();
    if (lexer.pos === at) return undefined;
    if (pdf[lexer.pos] !== 0x3c || pdf[lexer.pos + 1] !== 0x3c) {
      lexer.value(1);
      return undefined;
    }
    const entries = new Map<string, Value>();
    lexer.dict(1, entries);
    lexer.skipWhite();
    return lexer.pos === at ? dictOf(entries) : undefined;
  } catch (err) {
    if (!(err instanceof Fail)) throw err;
    return lexer.pos >= at ? "inside" : undefined;
  } finally {
    work.bytes += lexer.pos - objAt;
  }
}

interface Header {
  at: number;
  /** How often its value was lexed (each time from the header). */
  lexed: number;
  /** Where its object's `stream` keyword is, once found: keywords after it are in its data. */
  streamAt: number;
}

/**
 * Every stream of `pdf`, in order. Every `stream` keyword counts, inside another stream's data too
 * (pdf.js reads an object wherever the xref says), but not one that follows no dictionary (a word).
 */
export function* pdfStreams(pdf: Buffer, work: Work = { bytes: 0 }): Generator<PdfStream> {
  let search = 0;
  // The object headers (`obj` keywords) found so far in one forward scan, the newest last (a few kept).
  let headersTo = 0;
  const headers: Header[] = [];
  let headersDropped = false;
  const lineScan: LineScan = { from: -1, found: -1 };
  // The next `endstream` at or after `endFrom` (-1: none to the end of the file): searches move forward only.
  let endFrom = -1;
  let nextEnd = -1;
  for (;;) {
    const at = pdf.indexOf(STREAM, search);
    work.bytes += (at === -1 ? pdf.length : at + STREAM.length) - search;
    if (at === -1) return;
    search = at + STREAM.length;
    // The keyword alone: not `endstream`, not part of a longer word.
    if (isRegular(pdf[at - 1]) || isRegular(pdf[at + STREAM.length])) continue;
    for (let h = pdf.subarray(headersTo, at).indexOf(OBJ); h !== -1; h = pdf.subarray(headersTo, at).indexOf(OBJ)) {
      h += headersTo;
      headersTo = h + OBJ.length;
      if ((isWhite(pdf[h - 1]) || isDigit(pdf[h - 1])) && !isRegular(pdf[h + OBJ.length])) {
        headers.push({ at: h, lexed: 0, streamAt: -1 });
        if (headers.length > HEADERS_TRIED) {
          headers.shift();
          headersDropped = true;
        }
      }
    }
    work.bytes += at - headersTo;
    headersTo = at;
    const newest = headers.at(-1);
    // In the data of the newest object, a stream: no object starts here (it would have a header).
    if (newest && newest.streamAt !== -1) continue;
    // Not after a dictionary: a word.
    if (!followsDictionary(pdf, at, work, lineScan)) continue;
    if (!newest) throw new MalformedStream(at, "follows no object header");
    // The newest header's dictionary, or an older one's (the newer header may sit in its value):
    // a keyword is skipped only when inside a value and every candidate header was tried.
    let dict: StreamDict | undefined;
    let inside = false;
    let triedAll = !headersDropped;
    for (let i = headers.length - 1; i >= 0 && !dict; i--) {
      const header = headers[i]!;
      if (header.streamAt !== -1) {
        triedAll = true;
        break;
      }
      // A real object's keyword is lexed once or twice: more is an attempt to make this pass slow.
      if (++header.lexed > MAX_LEXES_PER_HEADER)
        throw new MalformedStream(at, "is one of too many after one object header");
      const found = dictionaryEndingAt(pdf, header.at, at, work);
      if (found === "inside") inside = true;
      else if (found) {
        dict = found;
        header.streamAt = at;
      }
    }
    if (!dict) {
      if (inside && triedAll) continue;
      throw new MalformedStream(at, "follows a dictionary that is not its object's");
    }
    let start = at + STREAM.length;
    if (pdf[start] === 0x0d) start++;
    if (pdf[start] === 0x0a) start++;
    let end = -1;
    let terminated = true;
    if (dict.length !== undefined && start + dict.length <= pdf.length) {
      // Its /Length, if `endstream` follows there.
      let after = start + dict.length;
      while (isWhite(pdf[after]) && after < start + dict.length + MAX_EOL) after++;
      work.bytes += after - (start + dict.length) + ENDSTREAM.length;
      if (pdf.subarray(after, after + ENDSTREAM.length).equals(ENDSTREAM)) end = start + dict.length;
    }
    if (end === -1) {
      if (endFrom === -1 || start < endFrom || (nextEnd !== -1 && start > nextEnd)) {
        nextEnd = pdf.indexOf(ENDSTREAM, start);
        work.bytes += (nextEnd === -1 ? pdf.length : nextEnd) - Math.max(start, endFrom);
        endFrom = start;
      }
      terminated = nextEnd !== -1;
      end = terminated ? nextEnd : pdf.length;
    }
    yield { dict, start, end, terminated };
  }
}
