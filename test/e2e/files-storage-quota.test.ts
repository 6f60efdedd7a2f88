import { request } from "node:http";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectedPartner, sendFile, settledCounts, type ConnectedPartner } from "../support/files.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { validateResponse } from "../support/openapi.js";
import { startTestStack, type TestStack } from "../support/services.js";

// The storage quota through the gateway (docs/files.md, "Storage quota"), small here: a test
// credential's files may hold 1 MiB, a live one's 4 MiB. The answer past it is the spec's 429
// envelope with Retry-After, before the body is read when the request's length says it cannot fit.

const KiB = 1024;
let stack: TestStack;
let p: ConnectedPartner;
let testToken: string;
let sandbox: string;

beforeAll(async () => {
  stack = await startTestStack({ SANDBOX_APPROVAL_DELAY_SECONDS: "0", TEST_FILE_STORAGE_QUOTA_BYTES: String(1024 * KiB), FILE_STORAGE_QUOTA_BYTES: String(4096 * KiB) });
  p = await connectedPartner(stack, "Quota Pharmacy");
  testToken = await accessToken(stack.baseUrl, p.test.clientId, p.test.clientSecret);
  sandbox = (await opsFor(stack.settings).info()).sandbox_elder_address;
  const con = await call(stack.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox });
  const deadline = Date.now() + 30_000;
  while ((await call(stack.baseUrl, testToken, "GET", `/v1/connections/${con.json!.id}`)).json!.status !== "approved") {
    if (Date.now() > deadline) throw new Error("the sandbox connection was not approved");
    await new Promise((r) => setTimeout(r, 200));
  }
});
afterAll(async () => {
  await stack?.stop();
});

/** POST /v1/files declaring `length` bytes of body and sending none of it: what the gateway answers before reading. */
function answerBeforeBody(token: string, length: number): Promise<{ status: number; headers: Headers; text: string; bodySent: number }> {
  const boundary = `----pi${randomBytes(12).toString("hex")}`;
  return new Promise((resolve, reject) => {
    const req = request(`${stack.baseUrl}/v1/files`, {
      method: "POST",
      agent: false,
      headers: { authorization: `Bearer ${token}`, "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(length) },
    });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const headers = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === "string") headers.set(k, v);
        resolve({ status: res.statusCode!, headers, text: Buffer.concat(chunks).toString(), bodySent: 0 });
        req.destroy();
      });
    });
    req.on("error", reject);
    req.flushHeaders();
  });
}

const text = (size: number) => Buffer.alloc(size, "q");

describe("a partner's storage quota, per mode", () => {
  it("a test credential fills only its own mode's quota: past it, 429 rate_limited with Retry-After in the envelope, before the body is read", async () => {
    expect((await sendFile(stack.baseUrl, testToken, sandbox, text(900 * KiB))).status).toBe(202);

    // The declared length cannot fit what is left: refused before a byte of the body was sent.
    const early = await answerBeforeBody(testToken, 200 * KiB);
    expect(early.status).toBe(429);
    // Only the retention sweep frees stored bytes: not before its next round.
    expect(early.headers.get("retry-after")).toBe("600");
    expect(JSON.parse(early.text)).toEqual({
      error: { type: "rate_limit_error", code: "rate_limited", message: expect.stringContaining("storage quota") },
    });
    validateResponse("POST", "/v1/files", early.status, early.headers, early.text);

    // A body of unknown length starts, and is refused when its bytes cross the quota; nothing of it stays.
    const before = await settledCounts(stack.settings);
    const crossing = await sendFile(stack.baseUrl, testToken, sandbox, async function* () {
      for (let i = 0; i < 8; i++) yield text(64 * KiB);
    });
    expect(crossing.status).toBe(429);
    expect(crossing.headers.get("retry-after")).toBe("1");
    expect(crossing.json).toMatchObject({ error: { code: "rate_limited", type: "rate_limit_error" } });
    expect(await settledCounts(stack.settings)).toMatchObject({ files: before.files, blobs: before.blobs, openUploads: 0 });

    // What still fits is accepted; the live credential has its own room.
    expect((await sendFile(stack.baseUrl, testToken, sandbox, text(100 * KiB))).status).toBe(202);
    expect((await sendFile(stack.baseUrl, p.token, p.elder, text(2048 * KiB))).status).toBe(202);
  });

  it("is the partner's own: another partner's uploads are not counted against it", async () => {
    const other = await connectedPartner(stack, "Roomy Clinic");
    expect((await sendFile(stack.baseUrl, other.token, other.elder, text(3 * 1024 * KiB))).status).toBe(202);
    expect((await answerBeforeBody(p.token, 2100 * KiB)).status).toBe(429);
    expect((await sendFile(stack.baseUrl, p.token, p.elder, text(1024 * KiB))).status).toBe(202);
  });
});
