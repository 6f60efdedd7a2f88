import type { Extracted } from "@pi/common/rules/extracted";
import { acceptedType } from "@pi/common/rules/media-types";
import type { PartnerMode } from "@pi/common/rules/mode";

// Test mode's magic value (docs/files.md, "Test files"): a test file sent with `purpose`
// `sandbox_failed` ends `failed` instead of `processed`; in live mode `purpose` has no effect.

export const SANDBOX_FAILED_PURPOSE = "sandbox_failed";

/** What a new file's record keeps of it in the clear (the purpose is stored only sealed). */
export function sandboxOutcome(mode: PartnerMode, purpose: string | null): "failed" | null {
  return mode === "test" && purpose === SANDBOX_FAILED_PURPOSE ? "failed" : null;
}

/** The outcome a test file ends with: none (processed), or the failure it asked for. */
export function testFileOutcome(file: { mediaType: string; sandboxOutcome?: "failed" | null }): Extracted | null {
  if (file.sandboxOutcome !== "failed") return null;
  return {
    ok: false,
    kind: acceptedType(file.mediaType)?.extraction ?? "plain-text",
    reason: "sandbox_failed",
    error: `a test file sent with purpose ${SANDBOX_FAILED_PURPOSE}`,
  };
}
