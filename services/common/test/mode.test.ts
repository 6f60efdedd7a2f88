import { describe, expect, it } from "@jest/globals";
import { commonv1 } from "@pi/proto";
import { isPartnerMode, modeFromProto, modeToProto, type PartnerMode } from "../src/rules/mode.js";

describe("the live/test mode mapping", () => {
  it("maps each mode to its wire value and back", () => {
    expect(modeToProto("live")).toBe(commonv1.Mode.LIVE);
    expect(modeToProto("test")).toBe(commonv1.Mode.TEST);
    for (const mode of ["live", "test"] as PartnerMode[]) expect(modeFromProto(modeToProto(mode))).toBe(mode);
  });

  it("names no mode for an unspecified or unknown wire value", () => {
    expect(modeFromProto(commonv1.Mode.UNSPECIFIED)).toBeUndefined();
    expect(modeFromProto(99 as commonv1.Mode)).toBeUndefined();
  });

  it("recognises only the two names", () => {
    expect(isPartnerMode("live")).toBe(true);
    expect(isPartnerMode("test")).toBe(true);
    for (const other of ["LIVE", "Test", "", "sandbox", undefined, null, 1]) expect(isPartnerMode(other)).toBe(false);
  });
});
