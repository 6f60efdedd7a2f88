import { describe, expect, it } from "@jest/globals";
import { nextTurn, type WaitingHead } from "../src/extraction-turns.js";

// Whose file extraction takes next (src/extraction-turns.ts), pure.

const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));
const head = (partnerId: string, oldest: number): WaitingHead => ({
  partnerId,
  fileId: `file_${partnerId}`,
  oldest: at(oldest),
});

describe("the next partner whose file is extracted (nextTurn)", () => {
  it("is the partner whose last file was taken longest ago, however old another partner's backlog is", () => {
    const heads = [head("flooder", 0), head("other", 50)];
    expect(
      nextTurn(
        heads,
        new Map([
          ["flooder", at(60)],
          ["other", at(10)],
        ]),
      )?.partnerId,
    ).toBe("other");
  });

  it("a partner never served goes before every partner served", () => {
    expect(nextTurn([head("flooder", 0), head("new", 99)], new Map([["flooder", at(1)]]))?.partnerId).toBe("new");
  });

  it("between partners never served (or served at the same time), the oldest waiting file; then the partner id", () => {
    expect(nextTurn([head("b", 5), head("a", 7), head("c", 3)], new Map())?.partnerId).toBe("c");
    expect(
      nextTurn(
        [head("b", 5), head("a", 5)],
        new Map([
          ["a", at(1)],
          ["b", at(1)],
        ]),
      )?.partnerId,
    ).toBe("a");
  });

  it("round robin: serving the chosen partner each time visits every waiting partner before any twice", () => {
    const lastTaken = new Map<string, Date>();
    const heads = [head("a", 0), head("b", 1), head("c", 2)];
    const order: string[] = [];
    for (let t = 10; t < 16; t++) {
      const next = nextTurn(heads, lastTaken)!;
      order.push(next.partnerId);
      lastTaken.set(next.partnerId, at(t));
    }
    expect(order).toEqual(["a", "b", "c", "a", "b", "c"]);
  });

  it("no partner waiting: nobody", () => {
    expect(nextTurn([], new Map())).toBeUndefined();
  });
});
