import type { ExtractionKind } from "./media-types.js";

// Stored sealed by file-intake: the partner sees only `processed` or `failed`.

/** Why a file ended `failed` (its `failureReason`, stored in the clear and logged): never its content. */
export const FAILURE_REASONS = [
  "unparseable",
  /** Written by 1.0.0 only (a PDF's streams decoded past its limit): records keep it. */
  "decoded_size",
  /** The extractor child went past its memory ceiling or time limit and was killed. */
  "memory_limit",
  "time_limit",
  /** The extractor died on the file (its process, or the child by a signal not ours) the allowed number of times. */
  "extractor_died",
  "unsupported_type",
  /** A test file sent with `purpose` exactly `sandbox_failed` (test mode's failed file; no extraction ran). */
  "sandbox_failed",
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

export type Extracted =
  | { ok: true; kind: "pdf-text"; text: string; textLength: number; textTruncated: boolean; pages: number }
  // A plain-text file is its own text: only its length is kept.
  | { ok: true; kind: "plain-text"; textLength: number }
  | { ok: true; kind: "image-dimensions"; width: number; height: number }
  | { ok: true; kind: "audio-duration"; durationSeconds: number }
  | { ok: false; kind: ExtractionKind; error: string; reason: FailureReason };

/** Stored text is capped (a MongoDB document holds at most 16 MB); the full length is kept. */
export const MAX_STORED_TEXT_CHARS = 1_000_000;

export const isFailureReason = (s: string | undefined): s is FailureReason =>
  (FAILURE_REASONS as readonly string[]).includes(s ?? "");
