import { describe, expect, it } from "@jest/globals";
import { UploadSlots } from "../src/upload-guards.js";

describe("uploads in flight: per partner and per instance", () => {
  it("admits up to the partner's cap, then refuses that partner only", () => {
    const slots = new UploadSlots(2, 10);
    expect(slots.tryTake("a")).toBeDefined();
    expect(slots.tryTake("a")).toBeDefined();
    expect(slots.tryTake("a")).toBeUndefined();
    expect(slots.tryTake("b")).toBeDefined();
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
    expect(slots.tryTake("a")).toBeDefined();
    // Two in flight again (b's and a's): the instance is at its cap.
    expect(slots.tryTake("c")).toBeUndefined();
  });
});
