import { afterAll, beforeAll, describe, expect, it, jest } from "@jest/globals";
import { randomBytes, randomUUID } from "node:crypto";
import { request } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { databaseName } from "@pi/common/store/mongo";
import { MongoClient } from "mongodb";
import { compatibilityPartitioner } from "@platformatic/kafka";
import { flateBombPdf, unterminatedStreamsPdf } from "../../services/extraction/test/hostile-pdfs.js";
import {
  connectedPartner,
  type ConnectedPartner,
  extractionOf,
  extractionOf as storedExtraction,
  filePart,
  fixture,
  generatedText,
  postMultipart,
  SAMPLES,
  sendFile,
  settledCounts,
  type storedCounts,
  textPart,
  waitForStatus,
  withFileDb,
} from "../support/files.js";
import { memoryOf, startGatewayProcess } from "../support/gateway-process.js";
import { validateResponse } from "../support/openapi.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { textPdf } from "../support/pdf.js";
import { sharedTestStack, startTestStack, stopSharedStacks, type TestStack } from "../support/services.js";
import { pacedUpload, type UploadAnswer } from "../support/slow-upload.js";

// Files end to end: POST /v1/files and what follows it (extraction, the result never exposed),
// idempotency, the size limit, the bounds on uploads in flight, the storage quota and the store's
// high-water mark, a hostile PDF, and health data encrypted at rest. Tests on a stack with default
// settings share one (sharedTestStack). Edge-only refusals (multipart 400/415, bad headers) are unit
// tests of the gateway (services/gateway/test).

afterAll(stopSharedStacks);

describe("files upload", () => {
  // POST /v1/files: what is accepted, every refusal, and the order in which the checks apply
  // (docs/files.md, "Order of checks"). The refusals the gateway makes alone (the bearer, the scope,
  // the headers, multipart framing and fields): services/gateway/test/edge-files.test.ts.

  let stack: TestStack;
  let p: ConnectedPartner;
  let domain: string;

  beforeAll(async () => {
    stack = await sharedTestStack();
    p = await connectedPartner(stack);
    domain = stack.settings.ADDRESS_DOMAIN;
  });
  afterAll(async () => {
    await stack?.stop();
  });

  function expectError(
    res: { status: number; json?: Record<string, unknown> },
    status: number,
    code: string,
    param?: string,
  ) {
    expect({ status: res.status, code: (res.json?.error as Record<string, unknown> | undefined)?.code }).toEqual({
      status,
      code,
    });
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
      const res = await sendFile(stack.baseUrl, p.token, p.elder, fixture(name), {
        purpose: "lab_result",
        filename: name,
      });
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
      const pdfAsZip = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"), {
        filename: "archive.zip",
        contentType: "application/zip",
      });
      expect(pdfAsZip.status).toBe(202);
      const zipAsPdf = await sendFile(stack.baseUrl, p.token, p.elder, fixture("unsupported.zip"), {
        filename: "scan.pdf",
        contentType: "application/pdf",
      });
      expectError(zipAsPdf, 415, "unsupported_media_type", "file");
    });

    it("the fields may come in any order, elder after the file included, and purpose is any string", async () => {
      const res = await postMultipart(stack.baseUrl, p.token, [
        filePart(fixture("sample.txt")),
        textPart("purpose", 'Pharmacy fill: 30 × 5 mg, "as needed"'),
        textPart("elder", p.elder.toUpperCase()),
      ]);
      expect(res.status).toBe(202);
    });
  });

  describe("refusals", () => {
    it("415 for a type outside the accepted set, and nothing is stored", async () => {
      const before = await settledCounts(stack.settings);
      for (const name of ["unsupported.zip", "unsupported.elf"]) {
        expectError(
          await sendFile(stack.baseUrl, p.token, p.elder, fixture(name)),
          415,
          "unsupported_media_type",
          "file",
        );
      }
      // Text that is not plain text: not UTF-8, a control byte, or binary after a clean first megabyte.
      expectError(
        await sendFile(stack.baseUrl, p.token, p.elder, Buffer.from([0x47, 0x72, 0xfc, 0xdf, 0x65, 0x0a])),
        415,
        "unsupported_media_type",
        "file",
      );
      expectError(
        await sendFile(stack.baseUrl, p.token, p.elder, Buffer.from("abc\u0000def")),
        415,
        "unsupported_media_type",
        "file",
      );
      const lateBinary = async function* () {
        yield* generatedText(1024 * 1024)();
        yield Buffer.from([0xff, 0xfe, 0x00]);
      };
      expectError(await sendFile(stack.baseUrl, p.token, p.elder, lateBinary), 415, "unsupported_media_type", "file");
      await expectNothingStored(before);
    });

    it.each([
      [
        "an unknown field comes after the file",
        () => [textPart("elder", p.elder), filePart(fixture("sample.txt")), textPart("colour", "blue")],
        "colour",
      ],
      [
        "a second file part is sent",
        () => [textPart("elder", p.elder), filePart(fixture("sample.txt")), filePart(fixture("sample.pdf"))],
        "file",
      ],
      ["elder is missing", () => [filePart(fixture("sample.txt"))], "elder"],
    ])(
      "400 invalid_request when %s, and nothing is stored (the bytes already streamed are discarded)",
      async (_name, parts, param) => {
        const before = await settledCounts(stack.settings);
        expectError(await postMultipart(stack.baseUrl, p.token, parts()), 400, "invalid_request", param);
        await expectNothingStored(before);
      },
    );
  });

  describe("order of checks", () => {
    const zipThenBig = async function* () {
      yield fixture("unsupported.zip");
      yield* generatedText(26 * 1024 * 1024)();
    };

    it("parts in the order they arrive: a bad field before the file wins over the file's type, and the type over a bad field after it", async () => {
      expectError(
        await postMultipart(stack.baseUrl, p.token, [textPart("elder", "nope"), filePart(fixture("unsupported.zip"))]),
        400,
        "invalid_request",
        "elder",
      );
      expectError(
        await postMultipart(stack.baseUrl, p.token, [filePart(fixture("unsupported.zip")), textPart("elder", "nope")]),
        415,
        "unsupported_media_type",
        "file",
      );
    });

    it("type (from the first bytes) before size: a 26 MiB ZIP is 415", async () => {
      expectError(await sendFile(stack.baseUrl, p.token, p.elder, zipThenBig), 415, "unsupported_media_type", "file");
    });

    it("size before the end of the body: a 26 MiB text with no elder after it is 413", async () => {
      expectError(
        await postMultipart(stack.baseUrl, p.token, [filePart(generatedText(26 * 1024 * 1024))]),
        413,
        "file_too_large",
        "file",
      );
    });

    it("every body check before the connection: without a connection, a bad body still gets its own error", async () => {
      const stranger = `apple.banana.cherry@${domain}`;
      expectError(
        await postMultipart(stack.baseUrl, p.token, [textPart("elder", "nope"), filePart(fixture("sample.txt"))]),
        400,
        "invalid_request",
        "elder",
      );
      expectError(
        await sendFile(stack.baseUrl, p.token, stranger, fixture("unsupported.elf")),
        415,
        "unsupported_media_type",
        "file",
      );
      expectError(
        await sendFile(stack.baseUrl, p.token, stranger, generatedText(26 * 1024 * 1024)),
        413,
        "file_too_large",
        "file",
      );
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
      expectError(
        await sendFile(stack.baseUrl, q.token, q.elder, fixture("sample.png"), { key: "before-revoke" }),
        409,
        "idempotency_key_reuse",
        "Idempotency-Key",
      );
      expectError(
        await sendFile(stack.baseUrl, q.token, q.elder, fixture("sample.png"), { key: "fresh" }),
        403,
        "no_active_connection",
      );
    });
  });
});

describe("files processing", () => {
  // After the 202: extraction of live files (results stored, never exposed), `failed` for bytes that
  // cannot be parsed, and test files that run no extraction and still go received -> processed.

  let stack: TestStack;
  let p: ConnectedPartner;

  beforeAll(async () => {
    stack = await startTestStack({ SANDBOX_APPROVAL_DELAY_SECONDS: "0" });
    p = await connectedPartner(stack, "Extraction Clinic");
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const extractionOf = (id: string) => storedExtraction(stack.settings, id);

  describe("live files", () => {
    const sent = new Map<string, string>();

    beforeAll(async () => {
      for (const name of [...SAMPLES, "corrupt.pdf"]) {
        const res = await sendFile(stack.baseUrl, p.token, p.elder, fixture(name), { purpose: "lab_result" });
        expect(res.json).toMatchObject({ status: "received" });
        sent.set(name, res.json!.id as string);
      }
    });

    it("every sample ends processed and the corrupt PDF ends failed", async () => {
      const statuses: Record<string, unknown> = {};
      for (const [name, id] of sent)
        statuses[name] = (await waitForStatus(stack.baseUrl, p.token, id, ["processed", "failed"])).json!.status;
      expect(statuses).toEqual({
        ...Object.fromEntries(SAMPLES.map((s) => [s, "processed"])),
        "corrupt.pdf": "failed",
      });
    });

    it("extraction results are stored inside file-intake", async () => {
      for (const id of sent.values()) await waitForStatus(stack.baseUrl, p.token, id, ["processed", "failed"]);
      const pdf = await extractionOf(sent.get("sample.pdf")!);
      expect(pdf).toMatchObject({ ok: true, kind: "pdf-text", pages: 1 });
      expect((pdf!.text as string).replace(/\s+/g, " ").trim()).toBe("Discharge summary: stable, follow up in 2 weeks");
      expect(await extractionOf(sent.get("sample.txt")!)).toEqual({
        ok: true,
        kind: "plain-text",
        textLength: fixture("sample.txt").toString("utf8").length,
        extractedAt: expect.any(Date),
      });
      expect(await extractionOf(sent.get("sample.jpg")!)).toMatchObject({
        ok: true,
        kind: "image-dimensions",
        width: 64,
        height: 48,
      });
      expect(await extractionOf(sent.get("sample.png")!)).toMatchObject({
        ok: true,
        kind: "image-dimensions",
        width: 64,
        height: 48,
      });
      expect(await extractionOf(sent.get("sample.heic")!)).toMatchObject({
        ok: true,
        kind: "image-dimensions",
        width: 64,
      });
      for (const audio of ["sample.wav", "sample.mp3", "sample.m4a"]) {
        const res = await extractionOf(sent.get(audio)!);
        expect(res).toMatchObject({ ok: true, kind: "audio-duration" });
        expect(Math.abs((res!.durationSeconds as number) - 1)).toBeLessThan(0.2);
      }
      expect(await extractionOf(sent.get("corrupt.pdf")!)).toMatchObject({
        ok: false,
        kind: "pdf-text",
        error: expect.any(String),
      });
    });

    it("extraction results are never exposed: the file resource is {id, status} and nothing else", async () => {
      for (const id of sent.values()) {
        const res = await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`);
        expect(Object.keys(res.json!).sort()).toEqual(["id", "status"]);
        expect(res.json!.id).toBe(id);
        expect(res.text).not.toMatch(/Discharge|width|height|duration|text|pages|sha256/);
      }
    });
  });

  describe("test files", () => {
    it("run no extraction and move received -> processed, even bytes that would fail a live extraction", async () => {
      const testToken = await accessToken(stack.baseUrl, p.test.clientId, p.test.clientSecret);
      const sandbox = (await opsFor(stack.settings).info()).sandbox_elder_address;
      const con = await call(stack.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox });
      expect(con.status).toBe(202);
      const deadline = Date.now() + 30_000;
      while (
        (await call(stack.baseUrl, testToken, "GET", `/v1/connections/${con.json!.id}`)).json!.status !== "approved"
      ) {
        if (Date.now() > deadline) throw new Error("the sandbox connection was not approved");
        await new Promise((r) => setTimeout(r, 200));
      }

      for (const name of ["sample.pdf", "corrupt.pdf"]) {
        const res = await sendFile(stack.baseUrl, testToken, sandbox, fixture(name));
        expect(res.status).toBe(202);
        expect(res.json!.status).toBe("received");
        const id = res.json!.id as string;
        expect((await waitForStatus(stack.baseUrl, testToken, id, ["processed", "failed"])).json!.status).toBe(
          "processed",
        );
        expect(await extractionOf(id)).toBeNull();
        expect(
          await withFileDb(stack.settings, (db) => db.collection("files").findOne({ _id: id as never })),
        ).toMatchObject({ mode: "test", status: "processed" });
      }
    });
  });
});

describe("files idempotency", () => {
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
    while ((await call(stack.baseUrl, testToken, "GET", `/v1/connections/${con.json!.id}`)).json!.status !== "approved")
      await sleep(100);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const filesOf = (partnerId: string) =>
    withFileDb(stack.settings, (db) => db.collection("files").countDocuments({ partnerId }));

  describe("the same key and the same payload", () => {
    it("a sequential retry gets the same receipt (same id, same 202, same bytes) and stores one file", async () => {
      const key = randomUUID();
      const before = await filesOf(p.partnerId);
      const first = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"), {
        key,
        purpose: "discharge_summary",
      });
      expect(first.status).toBe(202);
      for (let i = 0; i < 3; i++) {
        const retry = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"), {
          key,
          purpose: "discharge_summary",
          filename: `retry-${i}.pdf`,
        });
        expect({ status: retry.status, text: retry.text }).toEqual({ status: 202, text: first.text });
      }
      expect(await filesOf(p.partnerId)).toBe(before + 1);
    });

    it("concurrent retries get the same receipt and store one file", async () => {
      const key = randomUUID();
      const before = await filesOf(p.partnerId);
      const results = await Promise.all(
        Array.from({ length: 6 }, () => sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.wav"), { key })),
      );
      expect(results.map((r) => r.status)).toEqual(Array(6).fill(202));
      expect(new Set(results.map((r) => r.text)).size).toBe(1);
      expect(await filesOf(p.partnerId)).toBe(before + 1);
    });

    it("the elder is compared after normalisation, and the order of the parts does not matter", async () => {
      const key = randomUUID();
      const first = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"), {
        key,
        purpose: "care_note",
      });
      const reordered = await postMultipart(
        stack.baseUrl,
        p.token,
        [filePart(fixture("sample.txt")), textPart("purpose", "care_note"), textPart("elder", p.elder.toUpperCase())],
        {
          "idempotency-key": key,
        },
      );
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
      const first = await sendFile(stack.baseUrl, p.token, original.elder, original.data, {
        key,
        purpose: original.purpose,
      });
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
        error: {
          type: "invalid_request_error",
          code: "idempotency_key_reuse",
          message: "This Idempotency-Key was used with a different payload.",
          param: "Idempotency-Key",
        },
      });
      const again = await sendFile(stack.baseUrl, p.token, original.elder, original.data, {
        key,
        purpose: original.purpose,
      });
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
      expect((await sendFile(stack.baseUrl, testToken, sandbox, fixture("sample.m4a"), { key })).text).toBe(
        fromTest.text,
      );

      // A key claimed first in test mode, with another payload, does not block the live upload.
      const preClaimed = randomUUID();
      expect(
        (await sendFile(stack.baseUrl, testToken, sandbox, fixture("sample.txt"), { key: preClaimed })).status,
      ).toBe(202);
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
});

describe("files hostile pdf", () => {
  // A hostile PDF costs its extraction child, not the services: a FlateDecode bomb (a 0.5 MB file
  // whose content stream inflates to 500 MB) ends `failed` within bounded time, and uploads and reads
  // are served while it is being handled. Limits: services/extraction/src/extractor.ts.

  jest.setTimeout(240_000);

  let stack: TestStack;
  let p: ConnectedPartner;

  beforeAll(async () => {
    stack = await sharedTestStack();
    p = await connectedPartner(stack, "Hostile PDF Clinic");
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const extractionOf = (id: string) => storedExtraction(stack.settings, id);

  describe("a FlateDecode bomb", () => {
    it("ends failed within 2 minutes, while another upload and reads are served", async () => {
      const bomb = await sendFile(stack.baseUrl, p.token, p.elder, flateBombPdf(500));
      expect(bomb.status).toBe(202);
      const bombId = bomb.json!.id as string;
      const sentAt = Date.now();

      // While file-intake handles the bomb: another file is accepted and both can be read.
      const other = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"));
      expect(other.status).toBe(202);
      const otherId = other.json!.id as string;
      for (const id of [bombId, otherId]) {
        const read = await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`);
        expect(read.status).toBe(200);
      }

      const done = await waitForStatus(stack.baseUrl, p.token, bombId, ["processed", "failed"], 120_000);
      expect(done.json!.status).toBe("failed");
      expect(Date.now() - sentAt).toBeLessThan(120_000);
      // pdf.js inflates it in the extraction child, which meets its memory ceiling.
      expect(await extractionOf(bombId)).toMatchObject({
        ok: false,
        kind: "pdf-text",
        reason: "memory_limit",
        error: expect.stringMatching(/^extraction used more than/),
      });

      expect((await waitForStatus(stack.baseUrl, p.token, otherId, ["processed", "failed"])).json!.status).toBe(
        "processed",
      );
    });
  });

  describe("one partner flooding extraction", () => {
    // The partition of file-events a partner's events go to (keyed by partner id, the producer's
    // partitioner, 3 partitions): a consumer reads a partition in order, so a partner whose events
    // share the flooder's is the one a file-by-file consumer makes wait behind the whole flood.
    const partitionOf = (partnerId: string) => compatibilityPartitioner(undefined as never, Buffer.from(partnerId)) % 3;

    it("one partner's backlog never delays another partner's file by more than one file's extraction: eight 2.8 MB quadratic PDFs, then another partner's PDF is processed within 60 s", async () => {
      const flooder = await connectedPartner(stack, "Flooding Clinic");
      let other: ConnectedPartner | undefined;
      for (let i = 0; i < 20 && !other; i++) {
        const candidate = await connectedPartner(stack, `Quiet Clinic ${i}`);
        if (partitionOf(candidate.partnerId) === partitionOf(flooder.partnerId)) other = candidate;
      }
      expect(other).toBeDefined();
      // `1 0 obj <</Subtype /Image>> stream` over and over, no endstream: once quadratic to check (a 700 KB one took 4 s).
      const quadratic = unterminatedStreamsPdf(2_800_000);
      const flood = await Promise.all(
        Array.from({ length: 8 }, () => sendFile(stack.baseUrl, flooder.token, flooder.elder, quadratic)),
      );
      expect(flood.map((r) => r.status)).toEqual(Array(8).fill(202));

      const sentAt = Date.now();
      const sent = await sendFile(stack.baseUrl, other!.token, other!.elder, fixture("sample.pdf"));
      expect(sent.status).toBe(202);
      const done = await waitForStatus(
        stack.baseUrl,
        other!.token,
        sent.json!.id as string,
        ["processed", "failed"],
        60_000,
      );
      expect(done.json!.status).toBe("processed");
      expect(Date.now() - sentAt).toBeLessThan(60_000);

      // The flood itself ends: not a PDF pdf.js can read.
      for (const r of flood)
        expect(
          (await waitForStatus(stack.baseUrl, flooder.token, r.json!.id as string, ["processed", "failed"], 120_000))
            .json!.status,
        ).toBe("failed");
    });
  });
});

describe("files at rest", () => {
  // Health data encrypted at rest (docs/security.md, "Data at rest"): after uploads whose bytes,
  // extracted text and purpose carry distinctive markers, and their extraction, no document of any
  // service's database holds a marker in any form (as stored bytes, hex or base64), nor does
  // file-intake hold the elder's address. Read the way only a test may: every database, every
  // collection, every raw BSON document.

  let stack: TestStack;
  let p: ConnectedPartner;
  const marker = `ZEBRA${randomBytes(6).toString("hex")}QUOKKA`;
  const purpose = `purpose-${randomBytes(6).toString("hex")}-warfarin dose change`;

  beforeAll(async () => {
    stack = await sharedTestStack();
    p = await connectedPartner(stack, "At Rest Clinic");
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** Every form in which a value could sit in a stored document: its bytes, hex, base64 at each alignment. */
  function forms(value: string): { name: string; bytes: Buffer }[] {
    const raw = Buffer.from(value, "utf8");
    const out = [
      { name: "utf8", bytes: raw },
      { name: "hex", bytes: Buffer.from(raw.toString("hex")) },
    ];
    for (let shift = 0; shift < 3; shift++) {
      // The part of the base64 that does not depend on the bytes around the value.
      const b64 = Buffer.concat([Buffer.alloc(shift), raw]).toString("base64");
      out.push({ name: `base64+${shift}`, bytes: Buffer.from(b64.slice(Math.ceil((shift * 4) / 3) + 1, -4)) });
    }
    return out;
  }

  /** Where each form of each value occurs: database.collection and the form. */
  async function occurrences(values: Record<string, string>, services: string[]): Promise<string[]> {
    const found: string[] = [];
    const client = await MongoClient.connect(stack.settings.MONGODB_URI);
    try {
      for (const service of services) {
        const db = client.db(databaseName(stack.settings.DATA_NAMESPACE, service));
        for (const { name: collection } of await db.listCollections().toArray()) {
          for await (const doc of db.collection(collection).find({}, { raw: true })) {
            const bytes = doc as unknown as Buffer;
            for (const [what, value] of Object.entries(values)) {
              for (const form of forms(value))
                if (bytes.includes(form.bytes)) found.push(`${what} (${form.name}) in ${service}.${collection}`);
            }
          }
        }
      }
    } finally {
      await client.close();
    }
    return found;
  }

  describe("health data at rest", () => {
    it("no database holds a file's bytes, its extracted text or its purpose in plaintext; file-intake not the elder's address either", async () => {
      const small = Buffer.from(`Medication list for review.\n${marker}: warfarin 5 mg daily, INR check weekly.\n`);
      // Several chunks, the marker in each.
      const large = Buffer.from(`${`Care note, page filler. ${marker}\n`.repeat(80_000)}`);
      // Extracted text: a PDF's (a text file's text is the file itself), more than the stored cap of it.
      const pdf = textPdf(3_000_000, `Care note, page filler. ${marker}`);
      const ids: string[] = [];
      for (const [file, filename] of [
        [small, "list.txt"],
        [large, "notes.txt"],
        [pdf, "notes.pdf"],
      ] as const) {
        const res = await sendFile(stack.baseUrl, p.token, p.elder, file, { purpose, filename });
        expect(res.status).toBe(202);
        ids.push(res.json!.id as string);
      }
      for (const id of ids)
        expect((await waitForStatus(stack.baseUrl, p.token, id, ["processed", "failed"])).json!.status).toBe(
          "processed",
        );
      // The check can fail: the text was extracted and stored, and opens with the file's data key.
      const extracted = (await extractionOf(stack.settings, ids[2]!)) as { text: string; textTruncated: boolean };
      expect(extracted).toMatchObject({
        ok: true,
        kind: "pdf-text",
        textTruncated: true,
        text: expect.stringContaining(marker),
      });
      expect(extracted.text.length).toBeGreaterThan(1_000_000 - 1);

      expect(await occurrences({ marker, purpose }, ["auth", "connection", "file-intake", "webhook"])).toEqual([]);
      expect(await occurrences({ elder: p.elder }, ["file-intake"])).toEqual([]);
      // The search itself finds what is there: the connection service keeps the address (docs/security.md).
      expect((await occurrences({ elder: p.elder }, ["connection"])).length).toBeGreaterThan(0);
    });
  });
});

describe("files limits", () => {
  // The size limit at its exact byte, and the server's memory while 25 MiB files stream through. In a
  // stack of their own: 25 MiB files make every scan of file-intake's database slow.

  let stack: TestStack;
  let p: ConnectedPartner;

  beforeAll(async () => {
    stack = await startTestStack();
    p = await connectedPartner(stack);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** Stored blobs once the refused upload's bytes are gone (they are deleted just after the refusal). */
  const blobsStored = async () => (await settledCounts(stack.settings)).blobs;

  it("a file of exactly MAX_FILE_BYTES (25 MiB) is accepted and one byte more is 413 file_too_large", async () => {
    const max = stack.settings.MAX_FILE_BYTES;
    expect(max).toBe(25 * 1024 * 1024);
    const before = {
      files: await withFileDb(stack.settings, (db) => db.collection("files").countDocuments()),
      blobs: await blobsStored(),
    };
    const exact = await sendFile(stack.baseUrl, p.token, p.elder, generatedText(max));
    expect(exact.status).toBe(202);
    const over = await sendFile(stack.baseUrl, p.token, p.elder, generatedText(max + 1));
    expect({ status: over.status, body: over.json }).toEqual({
      status: 413,
      body: {
        error: {
          type: "invalid_request_error",
          code: "file_too_large",
          message: "The file is larger than the limit.",
          param: "file",
        },
      },
    });
    const after = {
      files: await withFileDb(stack.settings, (db) => db.collection("files").countDocuments()),
      blobs: await blobsStored(),
    };
    expect({ files: after.files - before.files, blobs: after.blobs - before.blobs }).toEqual({ files: 1, blobs: 1 });
  }, 180_000);

  it("memory stays bounded: the gateway streams four concurrent 25 MiB uploads without holding them", async () => {
    const max = stack.settings.MAX_FILE_BYTES;
    // The gateway measured runs as a process of its own, so its resident memory is its own (the
    // services and this client share the test process). A gateway that kept each file whole would
    // grow by the 100 MiB in flight; one that streams holds a few chunks per upload.
    const gateway = await startGatewayProcess(stack.settings);
    try {
      expect((await sendFile(gateway.baseUrl, p.token, p.elder, generatedText(max))).status).toBe(202); // warm-up
      const baseline = memoryOf(gateway.pid).rss;
      let peak = baseline;
      const sampler = setInterval(() => {
        peak = Math.max(peak, memoryOf(gateway.pid).rss);
      }, 50);
      try {
        const results = await Promise.all(
          Array.from({ length: 4 }, () => sendFile(gateway.baseUrl, p.token, p.elder, generatedText(max))),
        );
        expect(results.map((r) => r.status)).toEqual([202, 202, 202, 202]);
      } finally {
        clearInterval(sampler);
      }
      peak = Math.max(peak, memoryOf(gateway.pid).rss);
      expect(peak - baseline).toBeLessThan((2 * max) / (1024 * 1024)); // MiB: under half of what is in flight
    } finally {
      await gateway.stop();
    }
  }, 240_000);
});

describe("files bounds", () => {
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
    [a, b, c] = await Promise.all([
      connectedPartner(stack, "Drip Pharmacy"),
      connectedPartner(stack, "Busy Clinic"),
      connectedPartner(stack, "Third Lab"),
    ]);
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
        for (const u of uploads) u.finish();
      }
      expect((await Promise.all(uploads.map((u) => u.answer))).map((x) => x.status).sort()).toEqual([202, 202, 429]);
      expect((await sendFile(stack.baseUrl, a.token, a.elder, Buffer.from("a slot is free again\n"))).status).toBe(202);
    });

    it("uploads beyond UPLOAD_CONCURRENCY_TOTAL at one gateway are 429, whoever sends them", async () => {
      const uploads = [a, a, b, c].map((p) => pacedUpload(stack.baseUrl, p.token, p.elder, WELL_PACED));
      try {
        expect((await Promise.race(uploads.map((u) => u.answer))).status).toBe(429);
      } finally {
        for (const u of uploads) u.finish();
      }
      expect((await Promise.all(uploads.map((u) => u.answer))).map((x) => x.status).sort()).toEqual([
        202, 202, 202, 429,
      ]);
    });
  });
});

describe("files storage quota", () => {
  // The storage quota through the gateway (docs/files.md, "Storage quota"), small here: a test
  // credential's files may hold 1 MiB, a live one's 4 MiB. The answer past it is the spec's 429
  // envelope with Retry-After, before the body is read when the request's length says it cannot fit.

  const KiB = 1024;
  let stack: TestStack;
  let p: ConnectedPartner;
  let testToken: string;
  let sandbox: string;

  beforeAll(async () => {
    stack = await startTestStack({
      SANDBOX_APPROVAL_DELAY_SECONDS: "0",
      TEST_FILE_STORAGE_QUOTA_BYTES: String(1024 * KiB),
      FILE_STORAGE_QUOTA_BYTES: String(4096 * KiB),
    });
    p = await connectedPartner(stack, "Quota Pharmacy");
    testToken = await accessToken(stack.baseUrl, p.test.clientId, p.test.clientSecret);
    sandbox = (await opsFor(stack.settings).info()).sandbox_elder_address;
    const con = await call(stack.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox });
    const deadline = Date.now() + 30_000;
    while (
      (await call(stack.baseUrl, testToken, "GET", `/v1/connections/${con.json!.id}`)).json!.status !== "approved"
    ) {
      if (Date.now() > deadline) throw new Error("the sandbox connection was not approved");
      await new Promise((r) => setTimeout(r, 200));
    }
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** POST /v1/files declaring `length` bytes of body and sending none of it: what the gateway answers before reading. */
  function answerBeforeBody(
    token: string,
    length: number,
  ): Promise<{ status: number; headers: Headers; text: string; bodySent: number }> {
    const boundary = `----pi${randomBytes(12).toString("hex")}`;
    return new Promise((resolve, reject) => {
      const req = request(`${stack.baseUrl}/v1/files`, {
        method: "POST",
        agent: false,
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": `multipart/form-data; boundary=${boundary}`,
          "content-length": String(length),
        },
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
      expect(await settledCounts(stack.settings)).toMatchObject({
        files: before.files,
        blobs: before.blobs,
        openUploads: 0,
      });

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
});

describe("files store high water", () => {
  // The store-wide high-water mark through the gateway (docs/files.md, "Store-wide high-water mark"):
  // once every partner's files together reach FILE_STORE_HIGH_WATER_BYTES, an upload gets the spec's
  // 503 envelope with Retry-After at once (never a full disk, never a hang), whoever sends it.

  const KiB = 1024;
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack({
      FILE_STORE_HIGH_WATER_BYTES: String(600 * KiB),
      FILE_STORAGE_QUOTA_BYTES: String(500 * KiB),
    });
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
      expect(JSON.parse(refused.text)).toEqual({
        error: { type: "api_error", code: "service_unavailable", message: expect.any(String) },
      });
      validateResponse("POST", "/v1/files", refused.status, refused.headers, refused.text);
    });
  });
});
