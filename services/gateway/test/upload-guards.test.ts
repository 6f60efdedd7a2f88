import { describe, expect, it } from "@jest/globals";
import { TransferRate, UploadSlots } from "../src/upload-guards.js";

describe("uploads in flight: per partner and per instance", () => {
  it("admits up to the partner's cap, then refuses that partner only", () => {
    const slots = new UploadSlots(2, 10);
    expect(slots.tryTake("a")).toBeDefined();
    expect(slots.tryTake("a")).toBeDefined();
    expect(slots.tryTake("a")).toBeUndefined();
    expect(slots.tryTake("b")).toBeDefined();
    expect([slots.inFlight("a"), slots.inFlight("b"), slots.inFlight()]).toEqual([2, 1, 3]);
  });

  it("admits up to the instance's cap across partners", () => {
    const slots = new UploadSlots(5, 3);
    for (const p of ["a", "b", "c"]) expect(slots.tryTake(p)).toBeDefined();
    expect(slots.tryTake("d")).toBeUndefined();
  });

  it("a released slot can be taken again; releasing twice frees one slot only", () => {
    const slots = new UploadSlots(1, 2);
    const release = slots.tryTake("a")!;
    slots.tryTake("b");
    release();
    release();
    expect(slots.inFlight()).toBe(1);
    expect(slots.tryTake("a")).toBeDefined();
    expect(slots.tryTake("c")).toBeUndefined();
  });
});

describe("minimum transfer rate, window by window", () => {
  it("a window that brings at least rate × window bytes passes; one that brings fewer fails", () => {
    const rate = new TransferRate(1000, 2000, 100);
    expect(rate.windowEnded(2100)).toBe(true); // exactly 2000 bytes in 2 s
    expect(rate.windowEnded(4099)).toBe(false); // 1999
  });

  it("judges each window on its own: an early burst does not pay for a later stall", () => {
    const rate = new TransferRate(1000, 1000, 0);
    expect(rate.windowEnded(50_000)).toBe(true);
    expect(rate.windowEnded(50_010)).toBe(false);
  });

  it("a minimum of 0 never cuts an upload", () => {
    const rate = new TransferRate(0, 1000, 0);
    expect(rate.windowEnded(0)).toBe(true);
  });
});
