import { describe, expect, it } from "@jest/globals";
import {
  dayKey,
  holdsSlot,
  oldestKeptDay,
  PENDING_RETRY_AFTER_SECONDS,
  reopenWaitSeconds,
  repairedHolds,
  secondsUntilNextDay,
  slotChange,
} from "../src/bounds.js";
import type { InternalStatus } from "../src/state-machine.js";

const now = new Date("2030-01-01T00:00:00Z");
const ago = (s: number) => new Date(now.getTime() - s * 1000);

describe("the pending-connection bound's rules", () => {
  it("a pending or declined connection holds a slot (a decline reads as pending); approved, expired and revoked ones do not", () => {
    const all: InternalStatus[] = ["pending", "declined", "approved", "expired", "revoked"];
    expect(all.filter(holdsSlot)).toEqual(["pending", "declined"]);
  });

  it("a change into pending takes a slot, out of it gives it back, and a decline changes nothing", () => {
    expect(slotChange("revoked", "pending")).toBe("take");
    expect(slotChange("expired", "pending")).toBe("take");
    expect(slotChange("pending", "approved")).toBe("release");
    expect(slotChange("pending", "revoked")).toBe("release");
    expect(slotChange("declined", "revoked")).toBe("release");
    expect(slotChange("pending", "expired")).toBe("release");
    expect(slotChange("pending", "declined")).toBe("none");
    expect(slotChange("approved", "revoked")).toBe("none");
  });

  it("a full partner is told to try again later", () => {
    expect(PENDING_RETRY_AFTER_SECONDS).toBeGreaterThan(0);
  });
});

describe("a declining caregiver is asked again at most once per reopen interval", () => {
  it("a connection never reopened may reopen", () => {
    expect(reopenWaitSeconds(null, now, 3600)).toBeUndefined();
    expect(reopenWaitSeconds(undefined, now, 3600)).toBeUndefined();
  });

  it("within the interval of the last reopening: refused, to retry when the interval ends (rounded up, at least 1 s)", () => {
    expect(reopenWaitSeconds(ago(0), now, 3600)).toBe(3600);
    expect(reopenWaitSeconds(ago(1000.5), now, 3600)).toBe(2600);
    expect(reopenWaitSeconds(new Date(now.getTime() - 3600 * 1000 + 1), now, 3600)).toBe(1);
  });

  it("once the interval has passed: allowed again", () => {
    expect(reopenWaitSeconds(ago(3600), now, 3600)).toBeUndefined();
    expect(reopenWaitSeconds(ago(86400), now, 3600)).toBeUndefined();
  });
});

describe("the repair of a partner's slots", () => {
  it("is undefined when every slot belongs to a connection that holds one", () => {
    expect(repairedHolds({ con_a: ago(10), con_b: ago(5) }, ["con_b", "con_a"], now, 60_000)).toBeUndefined();
  });

  it("drops a slot whose connection no longer holds one once the grace has passed, keeps a young one (a request between its writes)", () => {
    expect(repairedHolds({ con_a: ago(120), con_b: ago(5), con_c: ago(300) }, ["con_c"], now, 60_000)).toEqual({
      con_b: ago(5),
      con_c: ago(300),
    });
  });

  it("adds a slot for a pending connection that has none (a release that raced a reopening)", () => {
    expect(repairedHolds({}, ["con_a"], now, 60_000)).toEqual({ con_a: now });
  });
});

describe("per-day bound on connections opened: the day's rules", () => {
  it("a day is the UTC calendar day, whatever the offset the time was written with", () => {
    expect(dayKey(new Date("2030-03-14T00:00:00Z"))).toBe("2030-03-14");
    expect(dayKey(new Date("2030-03-14T23:59:59.999Z"))).toBe("2030-03-14");
    expect(dayKey(new Date("2030-03-15T01:30:00+02:00"))).toBe("2030-03-14");
    expect(dayKey(new Date("2030-12-31T23:59:59Z"))).toBe("2030-12-31");
    expect(dayKey(new Date("2031-01-01T00:00:00Z"))).toBe("2031-01-01");
  });

  it("a partner past the bound retries at the next UTC midnight: Retry-After in whole seconds, rounded up, at least 1", () => {
    expect(secondsUntilNextDay(new Date("2030-03-14T00:00:00Z"))).toBe(86_400);
    expect(secondsUntilNextDay(new Date("2030-03-14T12:00:00Z"))).toBe(43_200);
    expect(secondsUntilNextDay(new Date("2030-03-14T23:59:58.500Z"))).toBe(2);
    expect(secondsUntilNextDay(new Date("2030-03-14T23:59:59.999Z"))).toBe(1);
    expect(secondsUntilNextDay(new Date("2028-02-28T23:00:00Z"))).toBe(3600); // a leap day follows
  });

  it("the repair keeps yesterday's and today's counters and deletes older ones", () => {
    const now = new Date("2030-03-01T00:10:00Z");
    expect(oldestKeptDay(now)).toBe("2030-02-28");
    const days = ["2030-02-26", "2030-02-27", "2030-02-28", "2030-03-01"];
    expect(days.filter((d) => d >= oldestKeptDay(now))).toEqual(["2030-02-28", "2030-03-01"]);
  });
});
