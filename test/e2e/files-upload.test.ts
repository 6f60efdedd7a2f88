import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import {
  connectedPartner,
  filePart,
  fixture,
  generatedText,
  postMultipart,
  SAMPLES,
  sendFile,
  settledCounts,
  storedCounts,
  textPart,
  type ConnectedPartner,
} from "../support/files.js";

// POST /v1/files: what is accepted, every refusal, and the order in which the checks apply
// (docs/files.md, "Order of checks").

let stack: TestStack;
let p: ConnectedPartner;
let domain: string;

beforeAll(async () => {
  stack = await startTestStack();
  p = await connectedPartner(stack);
  domain = stack.settings.ADDRESS_DOMAIN;
});
afterAll(async () => {
  await stack?.stop();
});

function expectError(res: { status: number; json?: Record<string, unknown> }, status: number, code: string, param?: string) {
  expect({ status: res.status, code: (res.json?.error as Record<string, unknown> | undefined)?.code }).toEqual({ status, code });
  const error = res.json!.error as Record<string, unknown>;
  if (param === undefined) expect(error.param).toBeUndefined();
  else expect(error.param).toBe(param);
  expect(Object.keys(res.json!)).toEqual(["error"]);
}

/** What file-intake stores settles back to `before` (a refusal discards its staged bytes right after answering). */
async function expectNothingStored(before: Awaited<ReturnType<typeof storedCounts>>) {
  // The discard may finish a moment after the answer (it deletes a late chunk once more, 500 ms on).
  const deadline = Date.now() + 5000;
  let counts = await settledCounts(stack.settings);
  while (JSON.stringify(counts) !== JSON.stringify(before) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    counts = await settledCounts(stack.settings);
  }
  expect(counts).toEqual(before);
}

describe("accepted files", () => {
  it.each(SAMPLES)("a real %s is accepted with 202 {id, status: received}", async (name) => {
    const res = await sendFile(stack.baseUrl, p.token, p.elder, fixture(name), { purpose: "lab_result", filename: name });
    expect(res.status).toBe(202);
    expect(Object.keys(res.json!).sort()).toEqual(["id", "status"]);
    expect(res.json).toEqual({ id: expect.stringMatching(/^file_[0-9A-Za-z]{22}$/), status: "received" });
    const get = await call(stack.baseUrl, p.token, "GET", `/v1/files/${res.json!.id}`);
    expect(get.status).toBe(200);
    expect(get.json!.id).toBe(res.json!.id);
  });

  it("a corrupt PDF is accepted: its type is sniffed as PDF (it fails later, in extraction)", async () => {
    const res = await sendFile(stack.baseUrl, p.token, p.elder, fixture("corrupt.pdf"));
    expect(res.status).toBe(202);
  });

  it("the type comes from the bytes: the declared Content-Type and file name are ignored", async () => {
    const pdfAsZip = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"), { filename: "archive.zip", contentType: "application/zip" });
    expect(pdfAsZip.status).toBe(202);
    const zipAsPdf = await sendFile(stack.baseUrl, p.token, p.elder, fixture("unsupported.zip"), { filename: "scan.pdf", contentType: "application/pdf" });
    expectError(zipAsPdf, 415, "unsupported_media_type", "file");
  });

  it("the fields may come in any order, elder after the file included, and purpose is any string", async () => {
    const res = await postMultipart(stack.baseUrl, p.token, [filePart(fixture("sample.txt")), textPart("purpose", "Pharmacy fill: 30 × 5 mg, \"as needed\""), textPart("elder", p.elder.toUpperCase())]);
    expect(res.status).toBe(202);
  });
});

describe("refusals", () => {
  it("415 for a type outside the accepted set, and nothing is stored", async () => {
    const before = await settledCounts(stack.settings);
    for (const name of ["unsupported.zip", "unsupported.elf"]) {
      expectError(await sendFile(stack.baseUrl, p.token, p.elder, fixture(name)), 415, "unsupported_media_type", "file");
    }
    // Text that is not plain text: not UTF-8, a control byte, or binary after a clean first megabyte.
    expectError(await sendFile(stack.baseUrl, p.token, p.elder, Buffer.from([0x47, 0x72, 0xfc, 0xdf, 0x65, 0x0a])), 415, "unsupported_media_type", "file");
    expectError(await sendFile(stack.baseUrl, p.token, p.elder, Buffer.from("abc\u0000def")), 415, "unsupported_media_type", "file");
    const lateBinary = async function* () {
      yield* generatedText(1024 * 1024)();
      yield Buffer.from([0xff, 0xfe, 0x00]);
    };
    expectError(await sendFile(stack.baseUrl, p.token, p.elder, lateBinary), 415, "unsupported_media_type", "file");
    await expectNothingStored(before);
  });

  it("415 when the body is not multipart/form-data", async () => {
    const res = await call(stack.baseUrl, p.token, "POST", "/v1/files", { elder: p.elder, file: "aGVsbG8=" });
    expectError(res, 415, "unsupported_media_type");
  });

  it.each([
    ["file is missing", () => [textPart("elder", p.elder)], "file"],
    ["elder is missing", () => [filePart(fixture("sample.txt"))], "elder"],
    ["elder is malformed", () => [textPart("elder", "not an address"), filePart(fixture("sample.txt"))], "elder"],
    ["elder has another domain", () => [textPart("elder", "apple.banana.cherry@example.com"), filePart(fixture("sample.txt"))], "elder"],
    ["elder is longer than 255 characters", () => [textPart("elder", `${"a".repeat(250)}.bb.cc@${domain}`), filePart(fixture("sample.txt"))], "elder"],
    ["elder is given twice", () => [textPart("elder", p.elder), textPart("elder", p.elder), filePart(fixture("sample.txt"))], "elder"],
    ["an unknown field comes before the file", () => [textPart("elder", p.elder), textPart("colour", "blue"), filePart(fixture("sample.txt"))], "colour"],
    ["an unknown field comes after the file", () => [textPart("elder", p.elder), filePart(fixture("sample.txt")), textPart("colour", "blue")], "colour"],
    ["a second file part is sent", () => [textPart("elder", p.elder), filePart(fixture("sample.txt")), filePart(fixture("sample.pdf"))], "file"],
    ["the file is in another field", () => [textPart("elder", p.elder), { ...filePart(fixture("sample.txt")), name: "document" }], "file"],
    ["file is a text field", () => [textPart("elder", p.elder), textPart("file", "hello")], "file"],
    ["the file is empty", () => [textPart("elder", p.elder), filePart(new Uint8Array(0))], "file"],
  ])("400 invalid_request when %s, and nothing is stored", async (_name, parts, param) => {
    const before = await settledCounts(stack.settings);
    expectError(await postMultipart(stack.baseUrl, p.token, parts()), 400, "invalid_request", param);
    await expectNothingStored(before);
  });

  it("400 when purpose is longer than 64 KiB or the body has too many parts", async () => {
    const long = await postMultipart(stack.baseUrl, p.token, [textPart("elder", p.elder), textPart("purpose", "x".repeat(64 * 1024 + 1)), filePart(fixture("sample.txt"))]);
    expectError(long, 400, "invalid_request", "purpose");
    const atLimit = await postMultipart(stack.baseUrl, p.token, [textPart("elder", p.elder), textPart("purpose", "x".repeat(64 * 1024)), filePart(fixture("sample.txt"))]);
    expect(atLimit.status).toBe(202);
    const tooMany = await postMultipart(stack.baseUrl, p.token, [textPart("elder", p.elder), textPart("purpose", "a"), textPart("purpose2", "b"), filePart(fixture("sample.txt"))]);
    expect(tooMany.status).toBe(400);
  });

  it("400 for multipart that is not well-formed", async () => {
    const noBoundary = await fetch(`${stack.baseUrl}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${p.token}`, "content-type": "multipart/form-data" },
      body: "whatever",
    });
    expect(noBoundary.status).toBe(400);
    const truncated = await fetch(`${stack.baseUrl}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${p.token}`, "content-type": "multipart/form-data; boundary=XYZ" },
      body: `--XYZ\r\nContent-Disposition: form-data; name="elder"\r\n\r\n${p.elder}\r\n--XYZ\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhello`,
    });
    expect(truncated.status).toBe(400);
    expect(((await truncated.json()) as { error: { code: string } }).error.code).toBe("invalid_request");
  });

  it.each([
    ["longer than 255 characters", "k".repeat(256)],
    ["empty", ""],
  ])("400 when Idempotency-Key is %s", async (_name, key) => {
    const res = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"), { key });
    expectError(res, 400, "invalid_request", "Idempotency-Key");
  });

  it("an Idempotency-Key of exactly 255 characters is accepted", async () => {
    expect((await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"), { key: "k".repeat(255) })).status).toBe(202);
  });

  it("401 without a valid bearer", async () => {
    expectError(await sendFile(stack.baseUrl, "not-a-token", p.elder, fixture("sample.txt")), 401, "unauthorized");
    expectError(await postMultipart(stack.baseUrl, undefined, [textPart("elder", p.elder), filePart(fixture("sample.txt"))]), 401, "unauthorized");
    expectError(await call(stack.baseUrl, undefined, "GET", "/v1/files/file_0000000000000000000000"), 401, "unauthorized");
  });

  it("403 insufficient_scope on POST /v1/files and GET /v1/files/{id} with a token granted only connections:write", async () => {
    const partner = await opsFor(stack.settings).partnerCreate({ name: "Narrow Scopes" });
    const narrow = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret, "connections:write");
    expectError(await sendFile(stack.baseUrl, narrow, p.elder, fixture("sample.txt")), 403, "insufficient_scope");
    expectError(await call(stack.baseUrl, narrow, "GET", "/v1/files/file_0000000000000000000000"), 403, "insufficient_scope");
    const full = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const own = await sendFile(stack.baseUrl, full, p.elder, fixture("sample.txt"));
    expectError(own, 403, "no_active_connection"); // this partner has no connection; the scope check passed
  });
});

describe("order of checks", () => {
  const zipThenBig = async function* () {
    yield fixture("unsupported.zip");
    yield* generatedText(26 * 1024 * 1024)();
  };

  it("authentication before scope before the body", async () => {
    expectError(await call(stack.baseUrl, "bad", "POST", "/v1/files", { not: "multipart" }), 401, "unauthorized");
    const partner = await opsFor(stack.settings).partnerCreate({ name: "Scope Order" });
    const narrow = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret, "connections:write");
    expectError(await call(stack.baseUrl, narrow, "POST", "/v1/files", { not: "multipart" }), 403, "insufficient_scope");
  });

  it("the request's headers before its body: a bad Idempotency-Key wins over a missing elder", async () => {
    const res = await postMultipart(stack.baseUrl, p.token, [filePart(fixture("unsupported.zip"))], { "idempotency-key": "k".repeat(300) });
    expectError(res, 400, "invalid_request", "Idempotency-Key");
  });

  it("parts in the order they arrive: a bad field before the file wins over the file's type, and the type over a bad field after it", async () => {
    expectError(await postMultipart(stack.baseUrl, p.token, [textPart("elder", "nope"), filePart(fixture("unsupported.zip"))]), 400, "invalid_request", "elder");
    expectError(await postMultipart(stack.baseUrl, p.token, [filePart(fixture("unsupported.zip")), textPart("elder", "nope")]), 415, "unsupported_media_type", "file");
  });

  it("type (from the first bytes) before size: a 26 MiB ZIP is 415", async () => {
    expectError(await sendFile(stack.baseUrl, p.token, p.elder, zipThenBig), 415, "unsupported_media_type", "file");
  });

  it("size before the end of the body: a 26 MiB text with no elder after it is 413", async () => {
    expectError(await postMultipart(stack.baseUrl, p.token, [filePart(generatedText(26 * 1024 * 1024))]), 413, "file_too_large", "file");
  });

  it("every body check before the connection: without a connection, a bad body still gets its own error", async () => {
    const stranger = `apple.banana.cherry@${domain}`;
    expectError(await postMultipart(stack.baseUrl, p.token, [textPart("elder", "nope"), filePart(fixture("sample.txt"))]), 400, "invalid_request", "elder");
    expectError(await sendFile(stack.baseUrl, p.token, stranger, fixture("unsupported.elf")), 415, "unsupported_media_type", "file");
    expectError(await sendFile(stack.baseUrl, p.token, stranger, generatedText(26 * 1024 * 1024)), 413, "file_too_large", "file");
    expectError(await sendFile(stack.baseUrl, p.token, stranger, fixture("sample.txt")), 403, "no_active_connection");
  });

  it("idempotency before the connection: after a revocation a retry gets its receipt and a reuse gets 409, not 403", async () => {
    const q = await connectedPartner(stack, "Revoked Later");
    const first = await sendFile(stack.baseUrl, q.token, q.elder, fixture("sample.jpg"), { key: "before-revoke" });
    expect(first.status).toBe(202);
    const del = await call(stack.baseUrl, q.token, "DELETE", `/v1/connections/${q.connectionId}`);
    expect(del.json!.status).toBe("revoked");
    const retry = await sendFile(stack.baseUrl, q.token, q.elder, fixture("sample.jpg"), { key: "before-revoke" });
    expect({ status: retry.status, body: retry.json }).toEqual({ status: 202, body: first.json });
    expectError(await sendFile(stack.baseUrl, q.token, q.elder, fixture("sample.png"), { key: "before-revoke" }), 409, "idempotency_key_reuse", "Idempotency-Key");
    expectError(await sendFile(stack.baseUrl, q.token, q.elder, fixture("sample.png"), { key: "fresh" }), 403, "no_active_connection");
  });
});
