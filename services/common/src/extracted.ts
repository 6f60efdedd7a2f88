import type { ExtractionKind } from "./media-types.js";

// What extraction (the extraction service) finds in a live file's bytes, and what file-intake stores
// about it (sealed, never exposed): the partner sees only `processed` or `failed`. A library that
// cannot parse the bytes, or bytes that break a limit, make the file `failed`, with a reason code.

/**
 * Why a file ended `failed`, stored in the clear on its record (`failureReason`) and logged: a code,
 * never anything of the file's content.
 */
export const FAILURE_REASONS = [
  /** The parser refused the bytes (a damaged file, not of its type). */
  "unparseable",
  /** A PDF's streams decode, through their filter chain, to more than the limit (checked before parsing). */
  "decoded_size",
  /** The extractor child went past its memory ceiling and was killed. */
  "memory_limit",
  /** The extractor child went past the time limit and was killed. */
  "time_limit",
  /** The extractor died on the file (its process, or the child by a signal not ours) the allowed number of times. */
  "extractor_died",
  /** No extraction for the file's media type. */
  "unsupported_type",
  /** A test file sent with `purpose` exactly `sandbox_failed` (test mode's failed file; no extraction ran). */
  "sandbox_failed",
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

export type Extracted =
  | { ok: true; kind: "pdf-text"; text: string; textLength: number; textTruncated: boolean; pages: number }
  // The text of a plain-text file is the file itself (UTF-8, checked as it was received): no copy is
  // kept, only its length, which file-intake measures while it receives the bytes (TextChecker).
  | { ok: true; kind: "plain-text"; textLength: number }
  | { ok: true; kind: "image-dimensions"; width: number; height: number }
  | { ok: true; kind: "audio-duration"; durationSeconds: number }
  | { ok: false; kind: ExtractionKind; error: string; reason: FailureReason };

/** Stored text is capped (a MongoDB document holds at most 16 MB); the full length is kept. */
export const MAX_STORED_TEXT_CHARS = 1_000_000;

export const isFailureReason = (s: string | undefined): s is FailureReason =>
  (FAILURE_REASONS as readonly string[]).includes(s ?? "");
