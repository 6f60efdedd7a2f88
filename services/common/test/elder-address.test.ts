import { describe, expect, it } from "@jest/globals";
import { checkElderAddress, sandboxElderAddress } from "../src/rules/elder-address.js";

const domain = "elders.example";

describe("elder address rules", () => {
  it.each(["apple.river.stone@elders.example", "ab.cd.ef@elders.example", "Apple.River.Stone@Elders.Example"])(
    "accepts %s",
    (value) => {
      const check = checkElderAddress(value, domain);
      expect(check).toEqual({ ok: true, address: value.toLowerCase() });
    },
  );

  it.each([
    ["two words", "apple.river@elders.example"],
    ["four words", "apple.river.stone.sea@elders.example"],
    ["another domain", "apple.river.stone@example.com"],
    ["digits", "apple.river.st0ne@elders.example"],
    ["a one-letter word", "a.river.stone@elders.example"],
    ["spaces", " apple.river.stone@elders.example"],
    ["no domain", "apple.river.stone"],
    ["two at signs", "apple.river.stone@elders.example@elders.example"],
    ["empty", ""],
    ["a word over 32 letters", `${"a".repeat(33)}.river.stone@elders.example`],
  ])("refuses %s", (_what, value) => {
    expect(checkElderAddress(value, domain).ok).toBe(false);
  });

  it("refuses more than 255 characters and non-strings", () => {
    expect(checkElderAddress(`${"a".repeat(250)}.b.c@elders.example`, domain)).toEqual({
      ok: false,
      reason: "must be at most 255 characters",
    });
    expect(checkElderAddress(42, domain).ok).toBe(false);
    expect(checkElderAddress(null, domain).ok).toBe(false);
  });

  it("makes the sandbox address a valid address of the domain", () => {
    expect(checkElderAddress(sandboxElderAddress(domain), domain).ok).toBe(true);
  });
});
