import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { connectedPartner, filePart, fixture, postMultipart, sendFile, textPart, withFileDb, type ConnectedPartner } from "../support/files.js";

// Idempotency-Key on POST /v1/files (docs/files.md, "Idempotency"): a retry with the same key and
// the same payload gets the same receipt, also concurrently; another payload under the key is 409.
// A key belongs to one partner in one mode: test and live share nothing.

let stack: TestStack;
let p: ConnectedPartner;
let sandbox: string;

beforeAll(async () => {
  stack = await startTestStack({ IDEMPOTENCY_TTL_SECONDS: "4", SANDBOX_APPROVAL_DELAY_SECONDS: "0" });
  p = await connectedPartner(stack, "Retrying Clinic");
  // The partner's test credential, connected to the sandbox elder (it approves at once here).
  sandbox = (await opsFor(stack.settings).info()).sandbox_elder_address;
  const testToken = await accessToken(stack.baseUrl, p.test.clientId, p.test.clientSecret);
  const con = await call(stack.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox });
  while ((await call(stack.baseUrl, testToken, "GET", `/v1/connections/${con.json!.id}`)).json!.status !== "approved") await sleep(100);
});
afterAll(async () => {
  await stack?.stop();
});

const filesOf = (partnerId: string) => withFileDb(stack.settings, (db) => db.collection("files").countDocuments({ partnerId }));

describe("the same key and the same payload", () => {
  it("a sequential retry gets the same receipt (same id, same 202, same bytes) and stores one file", async () => {
    const key = randomUUID();
    const before = await filesOf(p.partnerId);
    const first = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"), { key, purpose: "discharge_summary" });
    expect(first.status).toBe(202);
    for (let i = 0; i < 3; i++) {
      const retry = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"), { key, purpose: "discharge_summary", filename: `retry-${i}.pdf` });
      expect({ status: retry.status, text: retry.text }).toEqual({ status: 202, text: first.text });
    }
    expect(await filesOf(p.partnerId)).toBe(before + 1);
  });

  it("concurrent retries get the same receipt and store one file", async () => {
    const key = randomUUID();
    const before = await filesOf(p.partnerId);
    const results = await Promise.all(Array.from({ length: 6 }, () => sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.wav"), { key })));
    expect(results.map((r) => r.status)).toEqual(Array(6).fill(202));
    expect(new Set(results.map((r) => r.text)).size).toBe(1);
    expect(await filesOf(p.partnerId)).toBe(before + 1);
  });

  it("the elder is compared after normalisation, and the order of the parts does not matter", async () => {
    const key = randomUUID();
    const first = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"), { key, purpose: "care_note" });
    const reordered = await postMultipart(stack.baseUrl, p.token, [filePart(fixture("sample.txt")), textPart("purpose", "care_note"), textPart("elder", p.elder.toUpperCase())], {
      "idempotency-key": key,
    });
    expect({ status: reordered.status, text: reordered.text }).toEqual({ status: 202, text: first.text });
  });

  it("without a key, two identical sends are two files", async () => {
    const a = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"));
    const b = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"));
    expect(a.json!.id).not.toBe(b.json!.id);
  });
});

describe("the same key with another payload", () => {
  it.each([
    ["other file bytes", { data: fixture("sample.png") }],
    ["another elder", { elder: "other" }],
    ["another purpose", { purpose: "lab_result" }],
    ["no purpose instead of one", { purpose: undefined }],
    ["an empty purpose instead of one", { purpose: "" }],
  ])("409 idempotency_key_reuse for %s, while the original receipt stays", async (_name, change) => {
    const key = randomUUID();
    const original = { data: fixture("sample.jpg"), elder: p.elder, purpose: "care_note" as string | undefined };
    const first = await sendFile(stack.baseUrl, p.token, original.elder, original.data, { key, purpose: original.purpose });
    expect(first.status).toBe(202);
    let elder = original.elder;
    if ("elder" in change) {
      const q = await connectedPartner(stack, "Second Elder Owner"); // an elder this partner is not connected to
      elder = q.elder;
    }
    const next = { ...original, ...change, elder };
    const reuse = await sendFile(stack.baseUrl, p.token, next.elder, next.data, { key, purpose: next.purpose });
    expect(reuse.status).toBe(409);
    expect(reuse.json).toEqual({
      error: { type: "invalid_request_error", code: "idempotency_key_reuse", message: "This Idempotency-Key was used with a different payload.", param: "Idempotency-Key" },
    });
    const again = await sendFile(stack.baseUrl, p.token, original.elder, original.data, { key, purpose: original.purpose });
    expect(again.text).toBe(first.text);
  });

  it("keys belong to one partner: another partner's same key and payload is a file of its own", async () => {
    const key = randomUUID();
    const q = await connectedPartner(stack, "Independent Lab");
    const mine = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.mp3"), { key });
    const theirs = await sendFile(stack.baseUrl, q.token, q.elder, fixture("sample.mp3"), { key });
    expect([mine.status, theirs.status]).toEqual([202, 202]);
    expect(theirs.json!.id).not.toBe(mine.json!.id);
  });

  it("idempotency keys are per (partner, mode, key): a key reused across test and live gives two files, and neither use reveals or blocks the other", async () => {
    const testToken = await accessToken(stack.baseUrl, p.test.clientId, p.test.clientSecret);
    const key = randomUUID();
    const before = await filesOf(p.partnerId);
    const live = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.m4a"), { key });
    expect(live.status).toBe(202);
    const fromTest = await sendFile(stack.baseUrl, testToken, sandbox, fixture("sample.m4a"), { key });
    expect(fromTest.status).toBe(202);
    expect(fromTest.json!.id).not.toBe(live.json!.id);
    expect(await filesOf(p.partnerId)).toBe(before + 2);
    // Each mode replays its own receipt.
    expect((await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.m4a"), { key })).text).toBe(live.text);
    expect((await sendFile(stack.baseUrl, testToken, sandbox, fixture("sample.m4a"), { key })).text).toBe(fromTest.text);

    // A key claimed first in test mode, with another payload, does not block the live upload.
    const preClaimed = randomUUID();
    expect((await sendFile(stack.baseUrl, testToken, sandbox, fixture("sample.txt"), { key: preClaimed })).status).toBe(202);
    const after = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"), { key: preClaimed });
    expect(after.status).toBe(202);
    expect(await filesOf(p.partnerId)).toBe(before + 4);
  });
});

describe("retention", () => {
  it("a key is kept IDEMPOTENCY_TTL_SECONDS: after it, the same key starts afresh", async () => {
    const key = randomUUID();
    const keptUntil = Date.now() + stack.settings.IDEMPOTENCY_TTL_SECONDS * 1000;
    const first = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.heic"), { key });
    const within = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.heic"), { key });
    if (Date.now() < keptUntil) expect(within.text).toBe(first.text);
    await sleep(stack.settings.IDEMPOTENCY_TTL_SECONDS * 1000 + 500);
    const after = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.png"), { key });
    expect(after.status).toBe(202);
    expect(after.json!.id).not.toBe(first.json!.id);
  });
});
