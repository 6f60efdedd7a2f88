import { isAscii, isUtf8 } from "node:buffer";
import { fileTypeFromBuffer } from "file-type";

// The accepted file types of v1 (POST /v1/files), in one place. file-intake alone checks an upload
// with it as the bytes arrive, before storing them, and picks the extraction.
// A type is recognised from the bytes alone (never from the client's declared Content-Type or file
// name): by `file-type`'s signature detection for binary formats, and by the plain-text rule below
// for text, which has no signature. Adding a type is one entry here (plus an extractor in
// services/extraction/src/extraction-child.ts when its extraction is a new kind).

export type ExtractionKind = "pdf-text" | "plain-text" | "image-dimensions" | "audio-duration";

export interface AcceptedType {
  /** The media type stored with the file. */
  mediaType: string;
  /** What file-type reports for it (several spellings or brands map to one accepted type). */
  sniffed: readonly string[];
  extraction: ExtractionKind;
}

export const TEXT_MEDIA_TYPE = "text/plain";

export const ACCEPTED_TYPES: readonly AcceptedType[] = [
  { mediaType: "application/pdf", sniffed: ["application/pdf"], extraction: "pdf-text" },
  { mediaType: TEXT_MEDIA_TYPE, sniffed: [], extraction: "plain-text" },
  { mediaType: "image/jpeg", sniffed: ["image/jpeg"], extraction: "image-dimensions" },
  { mediaType: "image/png", sniffed: ["image/png"], extraction: "image-dimensions" },
  // HEIC is HEIF with HEVC images; files whose major brand is the generic `mif1` are sniffed as heif.
  { mediaType: "image/heic", sniffed: ["image/heic", "image/heif"], extraction: "image-dimensions" },
  { mediaType: "audio/wav", sniffed: ["audio/wav", "audio/vnd.wave", "audio/x-wav"], extraction: "audio-duration" },
  // MP3 with or without an ID3v2 tag in front (file-type skips the tag).
  { mediaType: "audio/mpeg", sniffed: ["audio/mpeg"], extraction: "audio-duration" },
  // M4A: AAC or ALAC audio in an MPEG-4 container with an audio brand (M4A, M4B, F4A).
  { mediaType: "audio/mp4", sniffed: ["audio/x-m4a", "audio/mp4"], extraction: "audio-duration" },
];

/** How many leading bytes the type is decided on (file-type's own detection window). */
export const SNIFF_BYTES = 4100;

export function acceptedType(mediaType: string): AcceptedType | undefined {
  return ACCEPTED_TYPES.find((t) => t.mediaType === mediaType);
}

/**
 * The accepted type of a file from its first bytes (at most SNIFF_BYTES; fewer only when the file is
 * that short), or undefined when it is not one we accept. A file that file-type recognises as any
 * other format is refused even when it happens to be text (XML, SVG, RTF...). Plain text is decided
 * here on its first bytes only; the rest is checked as it streams by a TextChecker.
 */
export async function recognise(head: Uint8Array): Promise<AcceptedType | undefined> {
  if (head.length === 0) return undefined;
  const sniffed = await fileTypeFromBuffer(head);
  if (sniffed) return ACCEPTED_TYPES.find((t) => t.sniffed.includes(sniffed.mime));
  const text = new TextChecker();
  return text.push(head) ? acceptedType(TEXT_MEDIA_TYPE) : undefined;
}

// C0 control characters other than tab, line feed, form feed and carriage return, and DEL: a file
// containing one is binary, not plain text. In valid UTF-8 these bytes stand only for themselves.
const BINARY_CONTROL_BYTES = [...Array(0x20).keys(), 0x7f].filter(
  (b) => b !== 0x09 && b !== 0x0a && b !== 0x0c && b !== 0x0d,
);

/** The length of the UTF-8 sequence that `lead` starts; 1 for a byte that starts none (isUtf8 refuses it where it stands). */
const sequenceLength = (lead: number) =>
  lead >= 0xc0 && lead < 0xe0 ? 2 : lead >= 0xe0 && lead < 0xf0 ? 3 : lead >= 0xf0 && lead < 0xf8 ? 4 : 1;

/** Where the character that `bytes` ends inside begins, or `bytes.length` when it ends on a character boundary. */
function incompleteTail(bytes: Uint8Array): number {
  for (let i = bytes.length - 1; i >= 0 && i >= bytes.length - 3; i--) {
    if ((bytes[i]! & 0xc0) !== 0x80) return bytes.length - i < sequenceLength(bytes[i]!) ? i : bytes.length;
  }
  return bytes.length;
}

/** UTF-16 code units of valid UTF-8: one per character, two for a character beyond U+FFFF (a 4-byte sequence). */
function utf16Units(bytes: Uint8Array): number {
  if (isAscii(bytes)) return bytes.length;
  let units = 0;
  for (const b of bytes) {
    if ((b & 0xc0) !== 0x80) units++;
    if (b >= 0xf0) units++;
  }
  return units;
}

const BOM = [0xef, 0xbb, 0xbf];

/**
 * Plain text is valid UTF-8 (a byte order mark allowed) without binary control characters. Checked
 * chunk by chunk, so a 25 MB file is never held whole; a multi-byte character may straddle chunks
 * (its first bytes are carried to the next chunk). Native scans (isUtf8, indexOf, isAscii): the check
 * runs over every byte in file-intake, which also measures the text's `length`.
 */
export class TextChecker {
  private valid = true;
  /** The first bytes of a character the last chunk ended inside (at most 3). */
  private carry: Buffer | undefined;
  private units = 0;
  /** How many of the file's first bytes are a byte order mark so far (3: it starts with one). */
  private bomBytes = 0;
  private seen = 0;

  /** `measure`: count the text's `length` as it is checked (file-intake records it; the gateway need not). */
  constructor(private readonly options: { measure?: boolean } = {}) {}

  /**
   * The text's length as JavaScript counts it (UTF-16 code units), a leading byte order mark not
   * counted: what `new TextDecoder().decode(file).length` gives, without decoding. Meaningful once
   * `end()` said true, for a checker made with `measure`.
   */
  get length(): number {
    return this.units - (this.bomBytes === 3 ? 1 : 0);
  }

  private count(bytes: Uint8Array): void {
    if (!this.options.measure) return;
    for (let i = 0; this.seen < 3 && i < bytes.length; i++, this.seen++)
      if (bytes[i] === BOM[this.seen] && this.bomBytes === this.seen) this.bomBytes++;
    this.units += utf16Units(bytes);
  }

  /** False once the bytes so far are not plain text. */
  push(chunk: Uint8Array): boolean {
    if (!this.valid) return false;
    let bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.carry) {
      // Complete the carried character with the bytes it still needs, and check it on its own.
      const need = sequenceLength(this.carry[0]!) - this.carry.length;
      const head = Buffer.concat([this.carry, bytes.subarray(0, need)]);
      bytes = bytes.subarray(need);
      if (head.length < sequenceLength(head[0]!)) {
        this.carry = head;
        return this.valid;
      }
      this.carry = undefined;
      this.valid = isUtf8(head);
      if (!this.valid) return false;
      this.count(head);
    }
    const cut = incompleteTail(bytes);
    const whole = bytes.subarray(0, cut);
    if (cut < bytes.length) this.carry = Buffer.from(bytes.subarray(cut));
    this.valid = isUtf8(whole) && BINARY_CONTROL_BYTES.every((b) => whole.indexOf(b) === -1);
    if (this.valid) this.count(whole);
    return this.valid;
  }

  /** At the end of the file: false when it ends inside a multi-byte character. */
  end(): boolean {
    if (this.carry) this.valid = false;
    return this.valid;
  }
}
