import { fileTypeFromBuffer } from "file-type";

// The accepted file types of POST /v1/files, recognised from the bytes alone (never the declared
// Content-Type or name): `file-type`'s signatures for binary formats, the plain-text rule below for text.

export type ExtractionKind = "pdf-text" | "plain-text" | "image-dimensions" | "audio-duration";

export interface AcceptedType {
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

/** The accepted type from the first SNIFF_BYTES; a format file-type knows is never text (XML, SVG...). */
export async function recognise(head: Uint8Array): Promise<AcceptedType | undefined> {
  if (head.length === 0) return undefined;
  const sniffed = await fileTypeFromBuffer(head);
  if (sniffed) return ACCEPTED_TYPES.find((t) => t.sniffed.includes(sniffed.mime));
  const text = new TextChecker();
  return text.push(head) ? acceptedType(TEXT_MEDIA_TYPE) : undefined;
}

// C0 control characters other than tab, line feed, form feed and carriage return, and DEL: binary.
// biome-ignore lint/suspicious/noControlCharactersInRegex: these characters are what it looks for
const BINARY_CONTROL = /[\x00-\x08\x0B\x0E-\x1F\x7F]/;

/** Plain text: valid UTF-8 without binary control characters, decoded as a stream (characters straddle chunks). */
export class TextChecker {
  private readonly decoder = new TextDecoder("utf-8", { fatal: true });
  private valid = true;
  /** The text's length as JavaScript counts it, a leading byte order mark not counted; meaningful once `end()` said true. */
  length = 0;

  push(chunk: Uint8Array): boolean {
    return this.decode(() => this.decoder.decode(chunk, { stream: true }));
  }

  /** At the end of the file: false when it ends inside a multi-byte character. */
  end(): boolean {
    return this.decode(() => this.decoder.decode());
  }

  private decode(next: () => string): boolean {
    if (!this.valid) return false;
    try {
      const text = next();
      this.length += text.length;
      this.valid = !BINARY_CONTROL.test(text);
    } catch {
      this.valid = false;
    }
    return this.valid;
  }
}
