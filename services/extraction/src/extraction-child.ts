import { imageSize } from "image-size";
import { parseBuffer } from "music-metadata";
import { writeFileSync } from "node:fs";
import type { Extracted } from "@pi/common/rules/extracted";
import type { ExtractionKind } from "@pi/common/rules/media-types";

// Runs in an extraction child process only (extractor.ts forks it), one task at a time over IPC.

export interface ExtractionTask {
  kind: ExtractionKind;
  mediaType: string;
  bytes: Uint8Array;
  /** Given, so that this child loads nothing of @pi/common. */
  maxTextChars: number;
}

/** A page with no text that costs more CPU than this is drawing operators (about 5 MiB), not a document: time_limit. */
const TEXTLESS_PAGE_CPU_MS = 500;

class TextlessPageTooCostly extends Error {}

type PdfJs = typeof import("pdfjs-dist/legacy/build/pdf.mjs");
let pdfjs: Promise<PdfJs> | undefined;

async function pdfText(bytes: Uint8Array, maxTextChars: number) {
  // The legacy build is the one pdf.js supports on Node; loaded on first use (it is large).
  pdfjs ??= import("pdfjs-dist/legacy/build/pdf.mjs");
  const { getDocument, VerbosityLevel } = await pdfjs;
  const doc = await getDocument({
    // pdf.js refuses a Buffer (what IPC delivers) and takes ownership of the bytes: this child's own copy
    data: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength),
    isEvalSupported: false,
    disableFontFace: true,
    useSystemFonts: false,
    verbosity: VerbosityLevel.ERRORS,
  }).promise;
  try {
    const pages: string[] = [];
    let length = 0;
    for (let n = 1; n <= doc.numPages && length <= maxTextChars; n++) {
      const cpuAtStart = process.cpuUsage();
      const page = await doc.getPage(n);
      const content = await page.getTextContent();
      const text = content.items.map((item) => ("str" in item ? item.str + (item.hasEOL ? "\n" : "") : "")).join("");
      const cpu = process.cpuUsage(cpuAtStart);
      if (!text && (cpu.user + cpu.system) / 1000 > TEXTLESS_PAGE_CPU_MS)
        throw new TextlessPageTooCostly(
          `page ${n} has no text and used more than ${TEXTLESS_PAGE_CPU_MS} ms of CPU time`,
        );
      pages.push(text);
      length += text.length;
      page.cleanup();
    }
    const text = pages.join("\n\f");
    return {
      text: text.slice(0, maxTextChars),
      textLength: text.length,
      textTruncated: text.length > maxTextChars,
      pages: doc.numPages,
    };
  } finally {
    await doc.destroy();
  }
}

function plainText(bytes: Uint8Array) {
  // Only for a text file recorded without its length; fatal, so a damaged record fails loudly.
  return { textLength: new TextDecoder("utf-8", { fatal: true }).decode(bytes).length };
}

function dimensions(bytes: Uint8Array) {
  const { width, height } = imageSize(bytes);
  if (!width || !height) throw new Error("no image dimensions");
  return { width, height };
}

async function duration(bytes: Uint8Array, mediaType: string) {
  const { format } = await parseBuffer(
    bytes,
    { mimeType: mediaType, size: bytes.length },
    { duration: true, skipCovers: true },
  );
  if (format.duration === undefined || !Number.isFinite(format.duration) || format.duration <= 0)
    throw new Error("no audio duration");
  return { durationSeconds: format.duration };
}

/** One task. Never throws for bad bytes: that is `{ ok: false }`. */
async function run({ kind, mediaType, bytes, maxTextChars }: ExtractionTask): Promise<Extracted> {
  try {
    switch (kind) {
      case "pdf-text":
        return { ok: true, kind, ...(await pdfText(bytes, maxTextChars)) };
      case "plain-text":
        return { ok: true, kind, ...plainText(bytes) };
      case "image-dimensions":
        return { ok: true, kind, ...dimensions(bytes) };
      case "audio-duration":
        return { ok: true, kind, ...(await duration(bytes, mediaType)) };
    }
  } catch (err) {
    if (err instanceof TextlessPageTooCostly) return { ok: false, kind, reason: "time_limit", error: err.message };
    return {
      ok: false,
      kind,
      reason: "unparseable",
      error: err instanceof Error ? `${err.name}: ${err.message}`.slice(0, 500) : "unparseable",
    };
  }
}

if (process.send) {
  // Should the container's memory limit be reached anyway, the kernel kills this child first.
  try {
    writeFileSync("/proc/self/oom_score_adj", "1000");
  } catch {
    // not Linux, or not allowed: the ceiling in extractor.ts still holds
  }
  process.on("message", (task: ExtractionTask) => {
    void run(task).then((result) => process.send!({ result }));
  });
  // The parent gone (killed): nothing left to answer to.
  process.on("disconnect", () => process.exit(0));
  process.send({ ready: true });
}
