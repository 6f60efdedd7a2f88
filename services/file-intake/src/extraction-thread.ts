import { imageSize } from "image-size";
import { parseBuffer } from "music-metadata";
import type { ExtractionKind } from "@pi/common";
import { checkDecodedSize } from "./decoded-size.js";
import { MAX_STORED_TEXT_CHARS, type Extracted } from "./extracted.js";

// Runs in an extraction worker thread only (extraction.ts starts them): the parsers of untrusted
// bytes, pdf.js above all, which replaces globals such as Array.prototype.push when it loads, never
// run in the thread that serves uploads.

export interface ExtractionTask {
  kind: ExtractionKind;
  mediaType: string;
  bytes: Uint8Array;
  maxDecodedBytes: number;
}

class Unparseable extends Error {}

function capped(text: string) {
  return { text: text.slice(0, MAX_STORED_TEXT_CHARS), textLength: text.length, textTruncated: text.length > MAX_STORED_TEXT_CHARS };
}

type PdfJs = typeof import("pdfjs-dist/legacy/build/pdf.mjs");
let pdfjs: Promise<PdfJs> | undefined;

async function pdfText(bytes: Uint8Array, maxDecodedBytes: number) {
  await checkDecodedSize(bytes, maxDecodedBytes);
  // The legacy build is the one pdf.js supports on Node; loaded on first use (it is large).
  pdfjs ??= import("pdfjs-dist/legacy/build/pdf.mjs");
  const { getDocument, VerbosityLevel } = await pdfjs;
  const doc = await getDocument({
    data: bytes, // pdf.js takes ownership of (detaches) the buffer: this thread's own copy
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

/** The thread's task. Never throws for bad bytes: that is `{ ok: false }`. */
export default async function run({ kind, mediaType, bytes, maxDecodedBytes }: ExtractionTask): Promise<Extracted> {
  try {
    switch (kind) {
      case "pdf-text":
        return { ok: true, kind, ...(await pdfText(bytes, maxDecodedBytes)) };
      case "plain-text":
        return { ok: true, kind, ...plainText(bytes) };
      case "image-dimensions":
        return { ok: true, kind, ...dimensions(bytes) };
      case "audio-duration":
        return { ok: true, kind, ...(await duration(bytes, mediaType)) };
    }
  } catch (err) {
    return { ok: false, kind, error: err instanceof Error ? `${err.name}: ${err.message}`.slice(0, 500) : "unparseable" };
  }
}
