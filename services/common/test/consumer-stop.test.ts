import { describe, expect, it, jest } from "@jest/globals";
import { Writable } from "node:stream";
import { atMost } from "../src/rules/at-most.js";
import { createLogger } from "../src/runtime/logger.js";
import { disconnectConsumer } from "../src/background/consume.js";
import { whileMetadataSettles } from "../src/events/kafka.js";
import { ResponseError } from "@platformatic/kafka";

// A stopping process must not wait on a consumer whose broker is gone (the client would retry its
// connection past the process's 15 s to stop).

function logged() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split("\n").filter(Boolean))
        lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { lines, logger: createLogger("test", "info", sink) };
}

describe("disconnectConsumer", () => {
  it("gives up on a consumer that does not disconnect within the bound, and says so", async () => {
    const { lines, logger } = logged();
    const never = { close: () => new Promise<void>(() => {}) };
    const t0 = performance.now();
    await disconnectConsumer(never, "partner-events", logger, 100);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(95);
    expect(lines).toEqual([
      expect.objectContaining({
        level: "warn",
        consumer: "partner-events",
        waitedMs: 100,
        msg: "Kafka consumer still stopping; left behind",
      }),
    ]);
  });

  it("returns as soon as the consumer has disconnected, and a failed disconnect is logged, not thrown", async () => {
    const { lines, logger } = logged();
    let disconnects = 0;
    await disconnectConsumer({ close: async () => void disconnects++ }, "file-events", logger, 60_000);
    await disconnectConsumer(
      { close: async () => Promise.reject(new Error("socket closed")) },
      "file-events",
      logger,
      60_000,
    );
    expect(disconnects).toBe(1);
    expect(lines).toEqual([expect.objectContaining({ level: "warn", consumer: "file-events", err: "socket closed" })]);
  });
});

describe("atMost", () => {
  it("is true when the promise settles in time (resolved or rejected), false when the bound passes first", async () => {
    expect(await atMost(Promise.resolve(1), 1_000)).toBe(true);
    expect(await atMost(Promise.reject(new Error("x")), 1_000)).toBe(true);
    expect(await atMost(new Promise(() => {}), 20)).toBe(false);
  });
});

describe("whileMetadataSettles", () => {
  it("tries again while the broker answers with a retriable error, and gives up at once on any other", async () => {
    let calls = 0;
    const settling = async () => {
      if (++calls < 3) throw new ResponseError(2, 9, { "/topics/0": [6, null] }, undefined); // NOT_LEADER_OR_FOLLOWER
      return "offsets";
    };
    // Its waits between tries (250 ms, then 500 ms) on jest's fake clock.
    jest.useFakeTimers();
    try {
      const settled = whileMetadataSettles(settling);
      await jest.advanceTimersByTimeAsync(250 + 500);
      expect(await settled).toBe("offsets");
    } finally {
      jest.useRealTimers();
    }
    expect(calls).toBe(3);
    let refused = 0;
    const fatal = async () => {
      refused++;
      throw new ResponseError(2, 9, { "/topics/0": [29, null] }, undefined); // TOPIC_AUTHORIZATION_FAILED
    };
    await expect(whileMetadataSettles(fatal)).rejects.toThrow(ResponseError);
    expect(refused).toBe(1);
  });
});
