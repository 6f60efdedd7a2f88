import { afterEach, describe, expect, it, jest } from "@jest/globals";
import type { IncomingMessage } from "node:http";
import { createLogger } from "@pi/common/logger";
import { PartnerError } from "../src/errors.js";
import { watchTransferRate } from "../src/upload-stream.js";

// The rate watchdog runs on `every` (services/common/src/periodic.ts); an injected clock drives its windows.

const settings = { UPLOAD_MIN_BYTES_PER_SECOND: 1000, UPLOAD_RATE_WINDOW_SECONDS: 2 };
const requestWith = (socket: { bytesRead: number }) => ({ socket }) as unknown as IncomingMessage;
const logger = createLogger("test", "silent");

afterEach(() => {
  jest.useRealTimers();
});

describe("the upload's transfer-rate watchdog", () => {
  it("rejects with 408 (and Connection: close) at the end of the first window that brings too few bytes", async () => {
    jest.useFakeTimers();
    const socket = { bytesRead: 500 };
    const watch = watchTransferRate(requestWith(socket), settings, logger);
    let outcome: unknown;
    watch.stalled.catch((err: unknown) => (outcome = err));

    socket.bytesRead += 2000; // exactly the minimum for a 2 s window
    await jest.advanceTimersByTimeAsync(2000);
    expect(outcome).toBeUndefined();

    socket.bytesRead += 1999;
    await jest.advanceTimersByTimeAsync(2000);
    expect(outcome).toBeInstanceOf(PartnerError);
    expect(outcome).toMatchObject({ code: "request_timeout", detail: { headers: { Connection: "close" } } });
    expect(jest.getTimerCount()).toBe(0);
  });

  it("stop() ends the watch: no window is judged after it", async () => {
    jest.useFakeTimers();
    const watch = watchTransferRate(requestWith({ bytesRead: 0 }), settings, logger);
    let outcome: unknown;
    watch.stalled.catch((err: unknown) => (outcome = err));
    watch.stop();
    expect(jest.getTimerCount()).toBe(0);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(outcome).toBeUndefined();
  });
});
