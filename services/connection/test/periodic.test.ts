import { describe, expect, it, jest } from "@jest/globals";
import { createLogger, every } from "@pi/common";
import { roundIntervals } from "../src/service.js";

const logger = createLogger("periodic-test", "silent");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("background rounds", () => {
  it("sandbox approvals are polled often enough to approve within SANDBOX_APPROVAL_DELAY_SECONDS + 60 s, whatever the delay", () => {
    for (const delay of [0, 1, 3, 30, 3600]) {
      const { sandboxApprovalMs } = roundIntervals({ SANDBOX_APPROVAL_DELAY_SECONDS: delay, CONNECTION_PENDING_TTL_SECONDS: 2592000 });
      expect(sandboxApprovalMs).toBeLessThanOrEqual(5000);
      expect(sandboxApprovalMs).toBeGreaterThanOrEqual(250);
    }
  });

  it("the expiry sweep runs at least every minute and at most every second", () => {
    expect(roundIntervals({ SANDBOX_APPROVAL_DELAY_SECONDS: 30, CONNECTION_PENDING_TTL_SECONDS: 2592000 }).expirySweepMs).toBe(60_000);
    expect(roundIntervals({ SANDBOX_APPROVAL_DELAY_SECONDS: 30, CONNECTION_PENDING_TTL_SECONDS: 1 }).expirySweepMs).toBe(1000);
  });

  it("runs at once, never two rounds at a time, survives a failing round, and stop() waits for the round in progress", async () => {
    // An injected clock (jest's fake timers): rounds and the waits inside them happen in virtual time.
    jest.useFakeTimers();
    try {
      let running = 0;
      let maxRunning = 0;
      let rounds = 0;
      let finished = 0;
      const periodic = every(
        "test",
        10,
        async () => {
          rounds++;
          running++;
          maxRunning = Math.max(maxRunning, running);
          await sleep(40);
          running--;
          finished++;
          if (rounds === 1) throw new Error("first round fails");
        },
        logger,
      );
      await jest.advanceTimersByTimeAsync(150);
      while (running === 0) await jest.advanceTimersByTimeAsync(1);
      let stopped = false;
      const stopping = periodic.stop().then(() => (stopped = true));
      await jest.advanceTimersByTimeAsync(0);
      expect(stopped).toBe(false); // a round is in progress
      await jest.advanceTimersByTimeAsync(40);
      await stopping;
      expect(rounds).toBeGreaterThanOrEqual(3);
      expect(maxRunning).toBe(1);
      expect(finished).toBe(rounds);
      const after = rounds;
      await jest.advanceTimersByTimeAsync(60_000);
      expect(rounds).toBe(after);
      expect(jest.getTimerCount()).toBe(0);
    } finally {
      jest.useRealTimers();
    }
  });
});
