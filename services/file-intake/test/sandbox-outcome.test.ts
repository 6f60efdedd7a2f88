import { describe, expect, it } from "@jest/globals";
import { SANDBOX_FAILED_PURPOSE, sandboxOutcome, testFileOutcome } from "../src/sandbox-outcome.js";

// Test mode's failed file (docs/files.md, "Test files"): the magic purpose, and nothing else, fails a test file.

describe("a test file's outcome", () => {
  it("purpose exactly sandbox_failed fails a test file", () => {
    expect(SANDBOX_FAILED_PURPOSE).toBe("sandbox_failed");
    expect(sandboxOutcome("test", "sandbox_failed")).toBe("failed");
    expect(testFileOutcome({ mediaType: "application/pdf", sandboxOutcome: "failed" })).toMatchObject({
      ok: false,
      kind: "pdf-text",
      reason: "sandbox_failed",
    });
    expect(testFileOutcome({ mediaType: "text/plain", sandboxOutcome: "failed" })).toMatchObject({
      ok: false,
      kind: "plain-text",
      reason: "sandbox_failed",
    });
  });

  it.each([null, "", "Sandbox_Failed", "sandbox_failed ", " sandbox_failed", "sandbox_fail", "lab_result"])(
    "purpose %j leaves a test file to end processed",
    (purpose) => {
      expect(sandboxOutcome("test", purpose)).toBeNull();
    },
  );

  it("in live mode purpose has no effect, sandbox_failed included", () => {
    expect(sandboxOutcome("live", "sandbox_failed")).toBeNull();
  });

  it("a record without the field (an older release's) ends processed", () => {
    expect(testFileOutcome({ mediaType: "application/pdf" })).toBeNull();
    expect(testFileOutcome({ mediaType: "application/pdf", sandboxOutcome: null })).toBeNull();
  });
});
