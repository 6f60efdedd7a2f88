import { describe, expect, it } from "@jest/globals";
import { endedConnectionCutoff } from "../src/retention.js";

const now = new Date("2030-01-01T00:00:00Z");
const DAY = 86_400;

describe("ended connections: kept ENDED_CONNECTION_RETENTION_SECONDS after their last change", () => {
  it("the cut-off is now minus the retention", () => {
    expect(endedConnectionCutoff(now, 2 * 365 * DAY, 30 * DAY)).toEqual(new Date("2028-01-02T00:00:00Z"));
    expect(endedConnectionCutoff(now, 3600, 60)).toEqual(new Date("2029-12-31T23:00:00Z"));
  });

  it("never later than the reopen interval allows: a shorter retention is read as the interval", () => {
    expect(endedConnectionCutoff(now, DAY, 30 * DAY)).toEqual(new Date("2029-12-02T00:00:00Z"));
    expect(endedConnectionCutoff(now, 30 * DAY, 30 * DAY)).toEqual(new Date("2029-12-02T00:00:00Z"));
  });

  it("moves with the clock, one for one", () => {
    const later = new Date(now.getTime() + 5000);
    expect(endedConnectionCutoff(later, 100, 10).getTime() - endedConnectionCutoff(now, 100, 10).getTime()).toBe(5000);
  });
});
