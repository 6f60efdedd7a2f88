import { describe, expect, it } from "@jest/globals";
import { clockTrusted, databaseTime, DatabaseClock, offsetFrom } from "../src/clock-offset.js";
import { metricsRegistry } from "@pi/common/metrics";

const rules = { limitMs: 125, maxAgeMs: 45_000 };

describe("clock offset from the database's clock (read leases are granted only on a clock within the margin)", () => {
  it("takes the sample of the shortest round trip: offset from its midpoint, half its round trip as uncertainty", () => {
    const measured = offsetFrom([
      { sentAt: 1_000, databaseNow: 5_000, receivedAt: 1_100 },
      { sentAt: 2_000, databaseNow: 6_010, receivedAt: 2_020 },
      { sentAt: 3_000, databaseNow: 7_000, receivedAt: 3_060 },
    ]);
    expect(measured).toEqual({ offsetMs: 2_010 - 6_010, uncertaintyMs: 10, measuredAt: 2_020 });
    expect(offsetFrom([])).toBeNull();
  });

  it("trusts a recent measurement within the limit, uncertainty included; nothing else", () => {
    const at = (offsetMs: number, uncertaintyMs = 5, measuredAt = 10_000) => ({ offsetMs, uncertaintyMs, measuredAt });
    expect(clockTrusted(at(100), 10_000, rules)).toBe(true);
    expect(clockTrusted(at(-120), 20_000, rules)).toBe(true);
    expect(clockTrusted(at(121), 10_000, rules)).toBe(false); // 121 + 5 > 125
    expect(clockTrusted(at(-4_000), 10_000, rules)).toBe(false);
    expect(clockTrusted(at(0, 200), 10_000, rules)).toBe(false); // a round trip too slow to vouch for anything
    expect(clockTrusted(at(0), 10_000 + 45_001, rules)).toBe(false); // stale
    expect(clockTrusted(at(0), 9_000, rules)).toBe(false); // the local clock went back
    expect(clockTrusted(null, 10_000, rules)).toBe(false);
  });

  it("reckons the database's time from the local clock and the offset; the local clock before any measurement", () => {
    expect(databaseTime({ offsetMs: -4_000, uncertaintyMs: 1, measuredAt: 0 }, 10_000)).toBe(14_000);
    expect(databaseTime({ offsetMs: 4_000, uncertaintyMs: 1, measuredAt: 0 }, 10_000)).toBe(6_000);
    expect(databaseTime(null, 10_000)).toBe(10_000);
  });

  it("with an injected clock 4 s behind: suspends leases, logs it once as structured fields, raises the gauges; resumes when the clock is right again", async () => {
    let skewMs = -4_000;
    const local = () => new Date(Date.now() + skewMs);
    const lines: { level: string; fields: Record<string, unknown>; msg: string }[] = [];
    const logger = {
      warn: (fields: Record<string, unknown>, msg: string) => lines.push({ level: "warn", fields, msg }),
      info: (fields: Record<string, unknown>, msg: string) => lines.push({ level: "info", fields, msg }),
    };
    const gauge = async (name: string) => (await metricsRegistry.getSingleMetric(name)!.get()).values[0]!.value;
    const clock = new DatabaseClock(async () => new Date(), local, rules, logger as never);
    await clock.measure();
    expect(clock.leasesAllowed()).toBe(false);
    expect(Math.abs(clock.now().getTime() - Date.now())).toBeLessThan(100);
    expect(await gauge("pi_connection_read_leases_suspended")).toBe(1);
    expect(await gauge("pi_connection_clock_offset_seconds")).toBeCloseTo(-4, 0);
    await clock.measure();
    expect(lines).toEqual([
      {
        level: "warn",
        fields: expect.objectContaining({ limitMs: 125, offsetMs: expect.any(Number) }),
        msg: expect.stringContaining("read leases suspended"),
      },
    ]);
    expect(lines[0]!.fields.offsetMs as number).toBeLessThan(-3_900);

    skewMs = 0;
    await clock.measure();
    expect(clock.leasesAllowed()).toBe(true);
    expect(await gauge("pi_connection_read_leases_suspended")).toBe(0);
    expect(lines.map((l) => l.level)).toEqual(["warn", "info"]);
    expect(lines[1]!.msg).toContain("read leases resumed");
  });

  it("a database that does not answer leaves the last measurement, which goes stale", async () => {
    let now = 1_000_000;
    let fail = false;
    const clock = new DatabaseClock(
      async () => {
        if (fail) throw new Error("down");
        return new Date(now);
      },
      () => new Date(now),
      rules,
    );
    await clock.measure();
    expect(clock.leasesAllowed()).toBe(true);
    fail = true;
    await expect(clock.measure()).rejects.toThrow("down");
    expect(clock.leasesAllowed()).toBe(true);
    now += rules.maxAgeMs + 1;
    expect(clock.leasesAllowed()).toBe(false);
  });
});
