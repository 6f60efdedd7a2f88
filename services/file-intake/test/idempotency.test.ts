import { describe, expect, it } from "@jest/globals";
import { decide, fingerprint, type KeyRecord, type Payload } from "../src/idempotency.js";
import { keyId } from "../src/store.js";

const payload: Payload = {
  sha256: "a".repeat(64),
  elder: "apple.banana.cherry@elders.example",
  purpose: "lab_result",
  mode: "live",
};

describe("idempotency keys are per (partner, mode, key)", () => {
  it("the same key of one partner names two records in test and live, and none of another partner's", () => {
    expect(keyId("ptr_a", "live", "k")).not.toBe(keyId("ptr_a", "test", "k"));
    expect(keyId("ptr_a", "live", "k")).not.toBe(keyId("ptr_b", "live", "k"));
    // A key may hold ":" itself: partner ids and modes never do, so the prefix is unambiguous.
    expect(keyId("ptr_a", "live", "test:k")).not.toBe(keyId("ptr_a", "test", "k"));
  });
});

describe("same payload", () => {
  it("is the same fingerprint for the same bytes, elder, purpose and mode", () => {
    expect(fingerprint({ ...payload })).toBe(fingerprint(payload));
  });

  it.each([
    ["other bytes", { sha256: "b".repeat(64) }],
    ["another elder", { elder: "apple.banana.grape@elders.example" }],
    ["another purpose", { purpose: "care_note" }],
    ["no purpose instead of one", { purpose: null }],
    ["an empty purpose instead of none", { purpose: "" }],
    ["the other credential mode", { mode: "test" as const }],
  ])("differs with %s", (_name, change) => {
    expect(fingerprint({ ...payload, ...change })).not.toBe(fingerprint(payload));
  });

  it("is not confused by values that concatenate alike", () => {
    expect(fingerprint({ ...payload, elder: "a", purpose: "bc" })).not.toBe(
      fingerprint({ ...payload, elder: "ab", purpose: "c" }),
    );
    expect(fingerprint({ ...payload, purpose: "null" })).not.toBe(fingerprint({ ...payload, purpose: null }));
  });
});

describe("what a request does about the stored key", () => {
  const now = new Date("2030-01-01T12:00:00Z");
  const lease = 60_000;
  const print = fingerprint(payload);
  const record = (over: Partial<KeyRecord> = {}): KeyRecord => ({
    fingerprint: print,
    fileId: "file_stored",
    state: "committed",
    claimedUntil: new Date(now.getTime() + lease - 1000),
    expiresAt: new Date(now.getTime() + 3_600_000),
    ...over,
  });

  it("its own fresh claim: owned", () => {
    expect(
      decide(record({ fileId: "file_mine", state: "claimed" }), { fingerprint: print, fileId: "file_mine" }, now),
    ).toEqual({ kind: "owned" });
  });

  it("a committed key with the same payload: replay of the stored file", () => {
    expect(decide(record(), { fingerprint: print, fileId: "file_mine" }, now)).toEqual({
      kind: "replay",
      fileId: "file_stored",
    });
  });

  it("a committed key with another payload: conflict", () => {
    expect(decide(record({ fingerprint: "other" }), { fingerprint: print, fileId: "file_mine" }, now)).toEqual({
      kind: "conflict",
    });
  });

  it("a claim in progress with the same payload: wait; with another: conflict", () => {
    expect(decide(record({ state: "claimed" }), { fingerprint: print, fileId: "file_mine" }, now)).toEqual({
      kind: "wait",
    });
    expect(
      decide(record({ state: "claimed", fingerprint: "other" }), { fingerprint: print, fileId: "file_mine" }, now),
    ).toEqual({ kind: "conflict" });
  });

  it("a claim whose lease has run out: abandoned, whatever its payload", () => {
    const old = now;
    expect(
      decide(record({ state: "claimed", claimedUntil: old }), { fingerprint: print, fileId: "file_mine" }, now),
    ).toEqual({ kind: "abandoned" });
    expect(
      decide(
        record({ state: "claimed", claimedUntil: old, fingerprint: "other" }),
        { fingerprint: print, fileId: "file_mine" },
        now,
      ),
    ).toEqual({ kind: "abandoned" });
  });

  it("a key past its retention: expired, as if absent, even with another payload", () => {
    expect(decide(record({ expiresAt: now }), { fingerprint: print, fileId: "file_mine" }, now)).toEqual({
      kind: "expired",
    });
    expect(
      decide(record({ expiresAt: now, fingerprint: "other" }), { fingerprint: print, fileId: "file_mine" }, now),
    ).toEqual({ kind: "expired" });
  });
});
