import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectedPartner, sendFile, settledCounts, type ConnectedPartner } from "../support/files.js";
import { startTestStack, type TestStack } from "../support/services.js";
import { pacedUpload, type UploadAnswer } from "../support/slow-upload.js";

// The bounds on uploads in flight (docs/files.md, "Bounds on uploads"), small here so they are
// reached quickly: two uploads per partner and three per gateway at once, and at least 1 KiB/s in
// every 1 s window.
let stack: TestStack;
let a: ConnectedPartner;
let b: ConnectedPartner;
let c: ConnectedPartner;

beforeAll(async () => {
  stack = await startTestStack({
    UPLOAD_CONCURRENCY_PER_PARTNER: "2",
    UPLOAD_CONCURRENCY_TOTAL: "3",
    UPLOAD_MIN_BYTES_PER_SECOND: "1024",
    UPLOAD_RATE_WINDOW_SECONDS: "1",
  });
  [a, b, c] = await Promise.all([connectedPartner(stack, "Drip Pharmacy"), connectedPartner(stack, "Busy Clinic"), connectedPartner(stack, "Third Lab")]);
});
afterAll(async () => {
  await stack?.stop();
});

const WELL_PACED = { bytesPerTick: 4096, tickMs: 100 }; // 40 KiB/s
const DRIP = { bytesPerTick: 16, tickMs: 200 }; // 80 B/s

const envelopeCode = (answer: UploadAnswer) => (JSON.parse(answer.body) as { error: { code: string } }).error.code;

describe("bounds on uploads in flight", () => {
  it("a slow-drip upload is cut off with 408 request_timeout, the connection closed, and nothing staged", async () => {
    const answer = await pacedUpload(stack.baseUrl, a.token, a.elder, DRIP).answer;
    expect(answer.status).toBe(408);
    expect(envelopeCode(answer)).toBe("request_timeout");
    expect(answer.headers.connection).toBe("close");
    // Cut at the end of the first window that fell short: one window, with room for a loaded machine.
    expect(answer.ms).toBeLessThan(5_000);
    expect(await settledCounts(stack.settings)).toMatchObject({ files: 0, blobs: 0 });
  });

  it("a partner's upload beyond UPLOAD_CONCURRENCY_PER_PARTNER is 429 rate_limited with Retry-After; other partners still send", async () => {
    // Three long uploads of one partner race for its two slots: the first answer is the refusal.
    const uploads = [1, 2, 3].map(() => pacedUpload(stack.baseUrl, a.token, a.elder, WELL_PACED));
    try {
      const refused = await Promise.race(uploads.map((u) => u.answer));
      expect(refused.status).toBe(429);
      expect(refused.headers["retry-after"]).toBe("1");
      expect(JSON.parse(refused.body)).toMatchObject({ error: { code: "rate_limited", type: "rate_limit_error" } });
      expect((await sendFile(stack.baseUrl, b.token, b.elder, Buffer.from("another partner\n"))).status).toBe(202);
    } finally {
      uploads.forEach((u) => u.finish());
    }
    expect((await Promise.all(uploads.map((u) => u.answer))).map((x) => x.status).sort()).toEqual([202, 202, 429]);
    expect((await sendFile(stack.baseUrl, a.token, a.elder, Buffer.from("a slot is free again\n"))).status).toBe(202);
  });

  it("uploads beyond UPLOAD_CONCURRENCY_TOTAL at one gateway are 429, whoever sends them", async () => {
    const uploads = [a, a, b, c].map((p) => pacedUpload(stack.baseUrl, p.token, p.elder, WELL_PACED));
    try {
      expect((await Promise.race(uploads.map((u) => u.answer))).status).toBe(429);
    } finally {
      uploads.forEach((u) => u.finish());
    }
    expect((await Promise.all(uploads.map((u) => u.answer))).map((x) => x.status).sort()).toEqual([202, 202, 202, 429]);
  });
});
