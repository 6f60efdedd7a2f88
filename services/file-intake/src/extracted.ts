import type { ExtractionKind } from "@pi/common";

// What extraction finds in a live file's bytes. Results stay inside file-intake (the extractions
// collection) and are never exposed; the partner sees only `processed` or `failed`. A library that
// cannot parse the bytes, or bytes that break a limit, make the file `failed`.

export type Extracted =
  | { ok: true; kind: "pdf-text"; text: string; textLength: number; textTruncated: boolean; pages: number }
  | { ok: true; kind: "plain-text"; text: string; textLength: number; textTruncated: boolean }
  | { ok: true; kind: "image-dimensions"; width: number; height: number }
  | { ok: true; kind: "audio-duration"; durationSeconds: number }
  | { ok: false; kind: ExtractionKind; error: string };

/** Stored text is capped (a MongoDB document holds at most 16 MB); the full length is kept. */
export const MAX_STORED_TEXT_CHARS = 1_000_000;
