import { describe, expect, it } from "@jest/globals";
import { roundIntervals } from "../src/service.js";

describe("the intervals of the connection service's rounds", () => {
  it("sandbox approvals are polled often enough to approve within SANDBOX_APPROVAL_DELAY_SECONDS + 60 s, whatever the delay", () => {
    for (const delay of [0, 1, 3, 30, 3600]) {
      const { sandboxApprovalMs } = roundIntervals({
        SANDBOX_APPROVAL_DELAY_SECONDS: delay,
        CONNECTION_PENDING_TTL_SECONDS: 2592000,
      });
      expect(sandboxApprovalMs).toBeLessThanOrEqual(5000);
      expect(sandboxApprovalMs).toBeGreaterThanOrEqual(250);
    }
  });

  it("the expiry sweep runs at least every minute and at most every second", () => {
    expect(
      roundIntervals({ SANDBOX_APPROVAL_DELAY_SECONDS: 30, CONNECTION_PENDING_TTL_SECONDS: 2592000 }).expirySweepMs,
    ).toBe(60_000);
    expect(
      roundIntervals({ SANDBOX_APPROVAL_DELAY_SECONDS: 30, CONNECTION_PENDING_TTL_SECONDS: 1 }).expirySweepMs,
    ).toBe(1000);
  });
});
