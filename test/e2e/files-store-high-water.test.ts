import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectedPartner, sendFile } from "../support/files.js";
import { validateResponse } from "../support/openapi.js";
import { startTestStack, type TestStack } from "../support/services.js";

// The store-wide high-water mark through the gateway (docs/files.md, "Store-wide high-water mark"):
// once every partner's files together reach FILE_STORE_HIGH_WATER_BYTES, an upload gets the spec's
// 503 envelope with Retry-After at once (never a full disk, never a hang), whoever sends it.

const KiB = 1024;
let stack: TestStack;

beforeAll(async () => {
  stack = await startTestStack({ FILE_STORE_HIGH_WATER_BYTES: String(600 * KiB), FILE_STORAGE_QUOTA_BYTES: String(500 * KiB) });
}, 180_000);
afterAll(async () => {
  await stack?.stop();
}, 120_000);

describe("the store-wide high-water mark", () => {
  it("past it, another partner's upload within its own quota gets a fast 503 service_unavailable with Retry-After", async () => {
    const a = await connectedPartner(stack, "Filling Pharmacy");
    const b = await connectedPartner(stack, "Late Clinic");
    const first = await sendFile(stack.baseUrl, a.token, a.elder, Buffer.alloc(400 * KiB, "a"));
    expect(first.status).toBe(202);
    expect((await sendFile(stack.baseUrl, b.token, b.elder, Buffer.alloc(150 * KiB, "b"))).status).toBe(202);
    // Each replica reads the store's total at most once a second: an upload meets the mark within
    // that. Small uploads, paced, so that b's own quota (350 KiB left: 35 of them, 3.5 s at least)
    // cannot run out before every replica has read the total past the mark.
    let refused: Awaited<ReturnType<typeof sendFile>> | undefined;
    for (const deadline = Date.now() + 10_000; !refused; ) {
      const r = await sendFile(stack.baseUrl, b.token, b.elder, Buffer.alloc(10 * KiB, "c"));
      if (r.status === 503) refused = r;
      else expect(r.status).toBe(202);
      if (Date.now() > deadline) throw new Error("no upload met the mark");
      if (!refused) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(refused.headers.get("retry-after")).toBe("60");
    expect(JSON.parse(refused.text)).toEqual({ error: { type: "api_error", code: "service_unavailable", message: expect.any(String) } });
    validateResponse("POST", "/v1/files", refused.status, refused.headers, refused.text);
  });
});
