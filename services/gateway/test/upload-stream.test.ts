import { afterEach, describe, expect, it, jest } from "@jest/globals";
import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import type { Router } from "@pi/common/rpc/server";
import { closeClient, serviceClient } from "@pi/common/rpc/client";
import { fileintakev1 } from "@pi/proto";
import { serveForTest, testIdentityKey } from "../../../test/support/local-client.js";
import type { FileIntakeClient } from "@pi/common/rpc/clients";
import { ErrorReason, RpcError, Status, serviceError } from "@pi/common/rpc/errors";
import { PartnerError } from "../src/errors.js";
import { MESSAGE_BYTES, Submission, watchTransferRate } from "../src/upload-stream.js";

// The rate watchdog's windows run on jest's fake clock.

const settings = { UPLOAD_MIN_BYTES_PER_SECOND: 1000, UPLOAD_RATE_WINDOW_SECONDS: 2 };
const requestWith = (socket: { bytesRead: number }) => ({ socket }) as unknown as IncomingMessage;

afterEach(() => {
  jest.useRealTimers();
});

/** A watchdog on a fake clock over a socket the test feeds; `outcome()` is what it rejected with, if anything. */
function watching(startBytes = 0, minBytesPerSecond = settings.UPLOAD_MIN_BYTES_PER_SECOND) {
  jest.useFakeTimers();
  const socket = { bytesRead: startBytes };
  const watch = watchTransferRate(requestWith(socket), { ...settings, UPLOAD_MIN_BYTES_PER_SECOND: minBytesPerSecond });
  let outcome: unknown;
  watch.stalled.catch((err: unknown) => (outcome = err));
  return { socket, watch, outcome: () => outcome };
}

describe("the upload's transfer-rate watchdog", () => {
  it("rejects with 408 (and Connection: close) at the end of the first window that brings too few bytes", async () => {
    const { socket, outcome } = watching(500);
    socket.bytesRead += 2000; // exactly the minimum for a 2 s window
    await jest.advanceTimersByTimeAsync(2000);
    expect(outcome()).toBeUndefined();

    socket.bytesRead += 1999;
    await jest.advanceTimersByTimeAsync(2000);
    expect(outcome()).toBeInstanceOf(PartnerError);
    expect(outcome()).toMatchObject({ code: "request_timeout", detail: { headers: { Connection: "close" } } });
    expect(jest.getTimerCount()).toBe(0);
  });

  it("judges each window on its own: an early burst does not pay for a later stall", async () => {
    const { socket, outcome } = watching();
    socket.bytesRead += 50_000;
    await jest.advanceTimersByTimeAsync(2000);
    expect(outcome()).toBeUndefined();
    socket.bytesRead += 10;
    await jest.advanceTimersByTimeAsync(2000);
    expect(outcome()).toMatchObject({ code: "request_timeout" });
  });

  it("a minimum of 0 never cuts an upload", async () => {
    const { watch, outcome } = watching(0, 0);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(outcome()).toBeUndefined();
    watch.stop();
  });

  it("stop() ends the watch: no window is judged after it", async () => {
    const { watch, outcome } = watching();
    watch.stop();
    expect(jest.getTimerCount()).toBe(0);
    await jest.advanceTimersByTimeAsync(10_000);
    expect(outcome()).toBeUndefined();
  });
});

describe("a file on its way to file-intake", () => {
  it("arrives byte for byte in messages of MESSAGE_BYTES, though the gateway reuses one buffer for them, at a slow reader too", async () => {
    const received: { sizes: number[]; sha256?: string } = { sizes: [] };
    const routes = (router: Router) =>
      router.service(fileintakev1.FileIntakeService, {
        async submitFile(requests) {
          const hash = createHash("sha256");
          for await (const r of requests) {
            if (r.part.case !== "chunk") continue;
            received.sizes.push(r.part.value.length);
            hash.update(r.part.value);
            await sleep(2); // a reader slower than the sender: the client's writes wait for it
          }
          received.sha256 = hash.digest("hex");
          return { file: { id: "file_1" } };
        },
      });
    const server = await serveForTest("file-intake", routes);
    const client = serviceClient(
      fileintakev1.FileIntakeService,
      `http://127.0.0.1:${server.port}`,
      testIdentityKey("gateway"),
    );
    try {
      // Plain text at random, in the multipart parser's 64 KiB pieces and odd ones.
      const bytes = randomBytes(3 * MESSAGE_BYTES + 12_345).map((b) => 97 + (b % 26));
      const pieces: Buffer[] = [];
      for (let at = 0, n = 0; at < bytes.length; n++) {
        const end = at + (n % 2 ? 65_536 : 10_007);
        pieces.push(bytes.subarray(at, end));
        at = end;
      }
      const submission = new Submission(client, { partnerId: "ptr_1" }, 10 * MESSAGE_BYTES);
      expect(await submission.forward(Readable.from(pieces))).toBe(bytes.length);
      await submission.finish({ elder: "apple.banana.cherry@elders.example" });
      expect(received.sha256).toBe(createHash("sha256").update(bytes).digest("hex"));
      expect(received.sizes).toEqual([MESSAGE_BYTES, MESSAGE_BYTES, MESSAGE_BYTES, 12_345]);
    } finally {
      closeClient(client);
      await server.close();
    }
  });
});

describe("a refusal of the gateway's", () => {
  type Requests = AsyncIterable<fileintakev1.SubmitFileRequest>;
  const standIn = (submitFile: (requests: Requests) => Promise<unknown>) =>
    ({ submitFile }) as unknown as FileIntakeClient;
  const own = new PartnerError("invalid_request", { param: "elder" });

  it("gives way to file-intake's earlier verdict: the quota, refused on the header before any body", async () => {
    const quota = serviceError(ErrorReason.STORAGE_QUOTA_EXCEEDED, "over", undefined, 600);
    const submission = new Submission(
      standIn(async (requests) => {
        for await (const _ of requests) throw quota;
      }),
      { partnerId: "ptr_1" },
      1024,
    );
    expect(await submission.refuse(own)).toBe(quota);
  });

  it("stands when file-intake has no earlier verdict; file-intake learns whether the file part had ended", async () => {
    const trailers: fileintakev1.SubmitFileTrailer[] = [];
    const client = standIn(async (requests) => {
      for await (const r of requests) if (r.part.case === "trailer") trailers.push(r.part.value);
      throw new RpcError("the gateway refused the body", Status.FAILED_PRECONDITION);
    });
    const whole = new Submission(client, { partnerId: "ptr_1" }, 1024);
    expect(await whole.forward(Readable.from([Buffer.from("hello")]))).toBe(5);
    expect(await whole.refuse(own)).toBe(own);
    expect(await new Submission(client, { partnerId: "ptr_1" }, 1024).refuse(own)).toBe(own);
    expect(trailers).toMatchObject([
      { refused: true, fileComplete: true },
      { refused: true, fileComplete: false },
    ]);
  });
});
