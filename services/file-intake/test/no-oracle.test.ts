import { describe, expect, it } from "@jest/globals";
import { CONNECTION_REFUSAL_MS, refusalDelay } from "../src/no-oracle.js";

describe("the time a refused connection check is held (no-oracle guarantee 2)", () => {
  it("answers every refusal at the same moment after the check started, however long the check took below the step", () => {
    for (const elapsed of [0, 1, 12.5, 80, CONNECTION_REFUSAL_MS - 1, CONNECTION_REFUSAL_MS]) {
      expect(elapsed + refusalDelay(elapsed)).toBe(CONNECTION_REFUSAL_MS);
    }
  });

  it("rounds a slower check up to the next step, never answering early", () => {
    expect(CONNECTION_REFUSAL_MS + 1 + refusalDelay(CONNECTION_REFUSAL_MS + 1)).toBe(2 * CONNECTION_REFUSAL_MS);
    expect(refusalDelay(3 * CONNECTION_REFUSAL_MS - 0.5)).toBeCloseTo(0.5);
  });
});
