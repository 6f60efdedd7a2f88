import { describe, expect, it } from "@jest/globals";
import {
  holdGrowth,
  initialHold,
  QUOTA_STEP_BYTES,
  quotaPressure,
  quotaVerdict,
  repairedUsage,
  usageKey,
} from "../src/quota.js";

// The storage quota's rules (src/quota.ts): reservations, the verdict and its Retry-After, the repair.

const MiB = 1024 * 1024;
const MAX = 25 * MiB;

describe("the storage quota's rules", () => {
  it("one counter per partner and mode", () => {
    expect(usageKey("ptr_1", "live")).toBe("ptr_1:live");
    expect(usageKey("ptr_1", "test")).not.toBe(usageKey("ptr_1", "live"));
  });

  it("before its first byte an upload reserves what it declared (at most MAX_FILE_BYTES); of unknown length, a step if it can, a byte if not", () => {
    expect(initialHold(1000, MAX)).toEqual({ need: 1000, want: 1000 });
    expect(initialHold(MAX + 500, MAX)).toEqual({ need: MAX, want: MAX });
    expect(initialHold(undefined, MAX)).toEqual({ need: 1, want: QUOTA_STEP_BYTES });
    expect(initialHold(undefined, MiB)).toEqual({ need: 1, want: MiB });
  });

  it("reserves more only once the bytes pass the hold: what arrived at least, a step ahead if it can, never past MAX_FILE_BYTES", () => {
    expect(holdGrowth(QUOTA_STEP_BYTES, QUOTA_STEP_BYTES, MAX)).toEqual({ need: 0, want: 0 });
    expect(holdGrowth(QUOTA_STEP_BYTES, QUOTA_STEP_BYTES + 1, MAX)).toEqual({ need: 1, want: QUOTA_STEP_BYTES });
    expect(holdGrowth(MAX - MiB, MAX - MiB + 10, MAX)).toEqual({ need: 10, want: MiB });
    // A declared length that was too short: what arrived is reserved whatever it is.
    expect(holdGrowth(100, 100 + 3 * QUOTA_STEP_BYTES, MAX)).toEqual({
      need: 3 * QUOTA_STEP_BYTES,
      want: 3 * QUOTA_STEP_BYTES,
    });
  });

  it("fits while the stored and held bytes with this upload's stay within the quota; the limit itself fits", () => {
    expect(quotaVerdict({ stored: 0, used: 0 }, 100, 100, 600)).toEqual({ fits: true });
    expect(quotaVerdict({ stored: 40, used: 60 }, 100, 40, 600)).toEqual({ fits: true });
    expect(quotaVerdict({ stored: 40, used: 60 }, 100, 41, 600).fits).toBe(false);
  });

  it("Retry-After: a second when the partner's own uploads in flight are in the way, else the retention sweep's next round", () => {
    expect(quotaVerdict({ stored: 40, used: 90 }, 100, 50, 600)).toEqual({ fits: false, retryAfterSeconds: 1 });
    expect(quotaVerdict({ stored: 90, used: 90 }, 100, 50, 600)).toEqual({ fits: false, retryAfterSeconds: 600 });
    expect(quotaVerdict({ stored: 0, used: 0 }, 100, 101, 0.5)).toEqual({ fits: false, retryAfterSeconds: 1 });
  });

  it("the repair: stored from the files, holds older than the longest upload dropped, used from both; nothing when right", () => {
    const now = new Date(10_000_000);
    const young = { id: "a", bytes: 5, at: new Date(now.getTime() - 1000) };
    const old = { id: "b", bytes: 7, at: new Date(now.getTime() - 3_600_001) };
    expect(repairedUsage({ stored: 50, used: 62, holds: [young, old], version: 3 }, 40, now, 3_600_000)).toEqual({
      stored: 40,
      used: 45,
      holds: [young],
    });
    expect(repairedUsage({ stored: 40, used: 45, holds: [young], version: 4 }, 40, now, 3_600_000)).toBeUndefined();
    // A counter short of what is stored (a crash after a file was written, before it settled) goes up.
    expect(repairedUsage({ stored: 0, used: 0, holds: [], version: 0 }, 40, now, 3_600_000)).toEqual({
      stored: 40,
      used: 40,
      holds: [],
    });
  });

  it("quota pressure: the highest used / quota ratio per mode; a partner at the threshold in either mode counts once", () => {
    const limits = { live: 1000, test: 100 };
    const pressure = quotaPressure(
      [
        { _id: usageKey("ptr_a", "live"), used: 950 },
        { _id: usageKey("ptr_a", "test"), used: 95 },
        { _id: usageKey("ptr_b", "live"), used: 900 },
        { _id: usageKey("ptr_c", "test"), used: 20 },
        { _id: usageKey("ptr_d", "live"), used: -5 },
      ],
      limits,
      0.9,
    );
    expect(pressure.maxRatio.live).toBeCloseTo(0.95);
    expect(pressure.maxRatio.test).toBeCloseTo(0.95);
    expect(pressure.partnersOver).toBe(2);
    expect(quotaPressure([], limits, 0.9)).toEqual({ maxRatio: { live: 0, test: 0 }, partnersOver: 0 });
  });
});
