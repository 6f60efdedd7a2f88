import { describe, expect, it } from "@jest/globals";
import { keyUnderMode, type KeyBeforeModes } from "../src/store/migrations/keys-under-mode.js";
import { compareReleases, isRelease } from "../src/runtime/release.js";

// The pure rules of upgrades (docs/upgrades.md): how releases compare, and how an idempotency key
// of 4e36e67 becomes one of 1.0.0.

describe("releases", () => {
  it("compare by MAJOR, then MINOR, then PATCH, as numbers", () => {
    expect(compareReleases("1.0.0", "1.0.0")).toBe(0);
    expect(compareReleases("1.0.0", "1.1.0")).toBeLessThan(0);
    expect(compareReleases("1.10.0", "1.9.9")).toBeGreaterThan(0);
    expect(compareReleases("2.0.0", "1.99.99")).toBeGreaterThan(0);
    expect(() => compareReleases("1.0", "1.0.0")).toThrow(RangeError);
    expect([isRelease("1.1.0"), isRelease("v1.1.0"), isRelease("1.1.0-rc.1"), isRelease(undefined)]).toEqual([
      true,
      false,
      false,
      false,
    ]);
  });
});

describe("file-intake 0001: an idempotency key of 4e36e67 under its file's mode", () => {
  const old: KeyBeforeModes = {
    _id: "ptr_a:live:x",
    partnerId: "ptr_a",
    key: "live:x",
    fingerprint: "f",
    fileId: "fil_1",
    state: "committed",
    claimedAt: new Date("2026-11-26T17:00:00Z"),
    expiresAt: new Date("2026-11-27T17:00:00Z"),
  };

  it("keeps the key, fingerprint, file, state and expiry; the id gains the mode (a key holding a colon too); the claim's end is its old claim time", () => {
    expect(keyUnderMode(old, "test")).toEqual({
      _id: "ptr_a:test:live:x",
      partnerId: "ptr_a",
      mode: "test",
      key: "live:x",
      fingerprint: "f",
      fileId: "fil_1",
      state: "committed",
      claimedUntil: old.claimedAt,
      expiresAt: old.expiresAt,
    });
  });

  it("a claim whose request stored no file is dropped, as if never made", () => {
    expect(keyUnderMode({ ...old, state: "claimed" }, null)).toBeNull();
  });
});
