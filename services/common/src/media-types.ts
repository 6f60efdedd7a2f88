import { fileTypeFromBuffer } from "file-type";

// The accepted file types of v1 (POST /v1/files), in one place. The gateway checks an upload with
// it as the bytes arrive; file-intake checks them again before storing, and picks the extraction.
// A type is recognised from the bytes alone (never from the client's declared Content-Type or file
// name): by `file-type`'s signature detection for binary formats, and by the plain-text rule below
// for text, which has no signature. Adding a type is one entry here (plus an extractor in
// services/file-intake/src/extraction.ts when its extraction is a new kind).

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
// containing one is binary, not plain text.
const BINARY_CONTROL = /[\u0000-\u0008\u000B\u000E-\u001F\u007F]/;

/**
 * Plain text is valid UTF-8 (a byte order mark allowed) without binary control characters. Checked
 * chunk by chunk, so a 25 MB file is never held whole; a multi-byte character may straddle chunks.
 */
export class TextChecker {
  private readonly decoder = new TextDecoder("utf-8", { fatal: true });
  private valid = true;

  /** False once the bytes so far are not plain text. */
  push(chunk: Uint8Array): boolean {
    if (!this.valid) return false;
    try {
      this.valid = !BINARY_CONTROL.test(this.decoder.decode(chunk, { stream: true }));
    } catch {
      this.valid = false;
    }
    return this.valid;
  }

  /** At the end of the file: false when it ends inside a multi-byte character. */
  end(): boolean {
    if (!this.valid) return false;
    try {
      this.decoder.decode();
      return true;
    } catch {
      this.valid = false;
      return false;
    }
  }
}
