import { imageSize } from "image-size";
import { parseBuffer } from "music-metadata";
import { acceptedType, type ExtractionKind } from "@pi/common";

// What extraction finds in a live file's bytes. Results stay inside file-intake (the extractions
// collection) and are never exposed; the partner sees only `processed` or `failed`. A library that
// cannot parse the bytes makes the file `failed`.

export type Extracted =
  | { ok: true; kind: "pdf-text"; text: string; textLength: number; textTruncated: boolean; pages: number }
  | { ok: true; kind: "plain-text"; text: string; textLength: number; textTruncated: boolean }
  | { ok: true; kind: "image-dimensions"; width: number; height: number }
  | { ok: true; kind: "audio-duration"; durationSeconds: number }
  | { ok: false; kind: ExtractionKind; error: string };

/** Stored text is capped (a MongoDB document holds at most 16 MB); the full length is kept. */
export const MAX_STORED_TEXT_CHARS = 1_000_000;

export class Unparseable extends Error {}

function capped(text: string) {
  return { text: text.slice(0, MAX_STORED_TEXT_CHARS), textLength: text.length, textTruncated: text.length > MAX_STORED_TEXT_CHARS };
}

type PdfJs = typeof import("pdfjs-dist/legacy/build/pdf.mjs");
let pdfjs: Promise<PdfJs> | undefined;

async function pdfText(bytes: Uint8Array) {
  // The legacy build is the one pdf.js supports on Node; loaded on first use (it is large).
  pdfjs ??= import("pdfjs-dist/legacy/build/pdf.mjs");
  const { getDocument, VerbosityLevel } = await pdfjs;
  const doc = await getDocument({
    data: new Uint8Array(bytes), // pdf.js takes ownership of (detaches) the buffer it is given
    isEvalSupported: false,
    disableFontFace: true,
    useSystemFonts: false,
    verbosity: VerbosityLevel.ERRORS,
  }).promise;
  try {
    const pages: string[] = [];
    let length = 0;
    for (let n = 1; n <= doc.numPages && length <= MAX_STORED_TEXT_CHARS; n++) {
      const page = await doc.getPage(n);
      const content = await page.getTextContent();
      const text = content.items.map((item) => ("str" in item ? item.str + (item.hasEOL ? "\n" : "") : "")).join("");
      pages.push(text);
      length += text.length;
      page.cleanup();
    }
    return { ...capped(pages.join("\n\f")), pages: doc.numPages };
  } finally {
    await doc.destroy();
  }
}

function plainText(bytes: Uint8Array) {
  // Validated as UTF-8 when it was received; fatal anyway, so a damaged record fails loudly.
  return capped(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
}

function dimensions(bytes: Uint8Array) {
  const { width, height } = imageSize(bytes);
  if (!width || !height) throw new Unparseable("no image dimensions");
  return { width, height };
}

async function duration(bytes: Uint8Array, mediaType: string) {
  const { format } = await parseBuffer(bytes, { mimeType: mediaType, size: bytes.length }, { duration: true, skipCovers: true });
  if (format.duration === undefined || !Number.isFinite(format.duration) || format.duration <= 0) throw new Unparseable("no audio duration");
  return { durationSeconds: format.duration };
}

/** Runs the extraction of the file's type. Never throws for bad bytes: that is `{ ok: false }`. */
export async function extract(mediaType: string, bytes: Uint8Array): Promise<Extracted> {
  const type = acceptedType(mediaType);
  if (!type) return { ok: false, kind: "plain-text", error: `no extraction for ${mediaType}` };
  try {
    switch (type.extraction) {
      case "pdf-text":
        return { ok: true, kind: "pdf-text", ...(await pdfText(bytes)) };
      case "plain-text":
        return { ok: true, kind: "plain-text", ...plainText(bytes) };
      case "image-dimensions":
        return { ok: true, kind: "image-dimensions", ...dimensions(bytes) };
      case "audio-duration":
        return { ok: true, kind: "audio-duration", ...(await duration(bytes, mediaType)) };
    }
  } catch (err) {
    return { ok: false, kind: type.extraction, error: err instanceof Error ? `${err.name}: ${err.message}`.slice(0, 500) : "unparseable" };
  }
}
