import { describe, expect, it } from "@jest/globals";
import { KeyedLock } from "@pi/common";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("KeyedLock", () => {
  it("runs tasks of one key one at a time, in call order, and tasks of other keys meanwhile", async () => {
    const lock = new KeyedLock();
    const log: string[] = [];
    const task = (key: string, n: number, ms: number) =>
      lock.run(key, async () => {
        log.push(`start ${key}${n}`);
        await sleep(ms);
        log.push(`end ${key}${n}`);
        return n;
      });
    const results = await Promise.all([task("a", 1, 30), task("a", 2, 1), task("b", 1, 5), task("a", 3, 1)]);
    expect(results).toEqual([1, 2, 1, 3]);
    expect(log.filter((l) => l.endsWith("a1") || l.endsWith("a2") || l.endsWith("a3"))).toEqual([
      "start a1",
      "end a1",
      "start a2",
      "end a2",
      "start a3",
      "end a3",
    ]);
    expect(log.indexOf("end b1")).toBeLessThan(log.indexOf("end a1"));
    expect(lock.size).toBe(0);
  });

  it("a failing task releases the key and the next one runs", async () => {
    const lock = new KeyedLock();
    await expect(lock.run("k", async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(await lock.run("k", async () => "next")).toBe("next");
    expect(lock.size).toBe(0);
  });
});
