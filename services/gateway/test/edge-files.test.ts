import { afterAll, beforeAll, beforeEach, describe, expect, it } from "@jest/globals";
import { fileintakev1 } from "@pi/proto";
import type { PARTNER_ERRORS } from "../src/errors.js";
import { startEdge, type Answer, type Edge } from "./edge-harness.js";

// POST /v1/files and GET /v1/files/{id} at the edge: what the gateway refuses by itself, in the
// order of docs/files.md ("Order of checks"): the bearer, then the scope, then the request's
// headers (each before file-intake is asked), then the body's framing and size. What file-intake
// judges (the quota, the type sniffed from the bytes, plain text, an empty file, idempotency, the
// connection, nothing stored) is in test/e2e/files.test.ts.

const ELDER = "amber.falcon.river@elders.example";
const FILE = "file_9fH2kL5nQ8rT1vX4zB7cD3";

let edge: Edge;
let token: string;
let connectionsOnly: string;
/** Uploads that reached file-intake. */
let submitted = 0;

beforeAll(async () => {
  edge = await startEdge({
    files: {
      checkStorageQuota: () => ({ fits: true }),
      submitFile: async (requests) => {
        submitted++;
        for await (const _ of requests) {
          // read to the end, as file-intake does
        }
        return { file: { id: FILE, status: fileintakev1.FileStatus.RECEIVED } };
      },
      getFile: () => ({ file: { id: FILE, status: fileintakev1.FileStatus.RECEIVED } }),
    },
  });
  token = await edge.token("ptr_files");
  connectionsOnly = await edge.token("ptr_files", "connections:write");
});
afterAll(() => edge.stop());
beforeEach(() => {
  submitted = 0;
});

const BOUNDARY = "----piEdgeFiles";
/** A multipart/form-data body: text fields, then a small text file. */
function multipart(fields: [string, string][], file = "hello\n"): Buffer {
  const parts = fields.map(
    ([name, value]) => `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`,
  );
  parts.push(
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="note.txt"\r\nContent-Type: text/plain\r\n\r\n${file}\r\n--${BOUNDARY}--\r\n`,
  );
  return Buffer.from(parts.join(""));
}

type Part = { name: string; value: string } | { name: string; filename: string; data: string };
const text = (name: string, value: string): Part => ({ name, value });
const file = (data = "hello\n", name = "file"): Part => ({ name, filename: "note.txt", data });
/** A multipart/form-data body of these parts, in this order. */
function parts(list: Part[]): Buffer {
  const body = list.map((p) =>
    "value" in p
      ? `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${p.name}"\r\n\r\n${p.value}\r\n`
      : `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${p.name}"; filename="${p.filename}"\r\nContent-Type: text/plain\r\n\r\n${p.data}\r\n`,
  );
  return Buffer.from(`${body.join("")}--${BOUNDARY}--\r\n`);
}

function upload(
  authorization: string | undefined,
  body: Buffer | string = multipart([["elder", ELDER]]),
  headers: Record<string, string> = {},
) {
  return edge.send("POST", "/v1/files", {
    headers: {
      ...(authorization ? { authorization } : {}),
      "content-type": `multipart/form-data; boundary=${BOUNDARY}`,
      ...headers,
    },
    body,
  });
}

function expectError(res: Answer, status: number, code: keyof typeof PARTNER_ERRORS, param?: string) {
  expect({ status: res.status, code: res.json?.error?.code }).toEqual({ status, code });
  expect(res.json.error.param).toBe(param);
  expect(Object.keys(res.json)).toEqual(["error"]);
}

describe("POST /v1/files refusals the gateway makes alone", () => {
  it("the control: a well-formed upload reaches file-intake and is 202 {id, status}", async () => {
    const res = await upload(`Bearer ${token}`);
    expect(res.status).toBe(202);
    expect(res.json).toEqual({ id: FILE, status: "received" });
    expect(submitted).toBe(1);
  });

  it.each([
    ["file is missing", () => [text("elder", ELDER)], "file"],
    ["elder is missing", () => [file()], "elder"],
    ["elder is malformed", () => [text("elder", "not an address"), file()], "elder"],
    ["elder has another domain", () => [text("elder", "apple.banana.cherry@example.com"), file()], "elder"],
    [
      "elder is longer than 255 characters",
      () => [text("elder", `${"a".repeat(250)}.bb.cc@elders.example`), file()],
      "elder",
    ],
    ["elder is given twice", () => [text("elder", ELDER), text("elder", ELDER), file()], "elder"],
    ["an unknown field comes before the file", () => [text("elder", ELDER), text("colour", "blue"), file()], "colour"],
    ["an unknown field comes after the file", () => [text("elder", ELDER), file(), text("colour", "blue")], "colour"],
    ["a second file part is sent", () => [text("elder", ELDER), file(), file("%PDF-1.4")], "file"],
    ["the file is in another field", () => [text("elder", ELDER), file("hello", "document")], "file"],
    ["file is a text field", () => [text("elder", ELDER), text("file", "hello")], "file"],
  ] as [string, () => Part[], string][])("400 invalid_request when %s", async (_name, list, param) => {
    expectError(await upload(`Bearer ${token}`, parts(list())), 400, "invalid_request", param);
  });

  it("400 when purpose is longer than 64 KiB or the body has too many parts", async () => {
    expectError(
      await upload(
        `Bearer ${token}`,
        parts([text("elder", ELDER), text("purpose", "x".repeat(64 * 1024 + 1)), file()]),
      ),
      400,
      "invalid_request",
      "purpose",
    );
    expect(
      (await upload(`Bearer ${token}`, parts([text("elder", ELDER), text("purpose", "x".repeat(64 * 1024)), file()])))
        .status,
    ).toBe(202);
    expect(
      (
        await upload(
          `Bearer ${token}`,
          parts([text("elder", ELDER), text("purpose", "a"), text("purpose2", "b"), file()]),
        )
      ).status,
    ).toBe(400);
  });

  it("the fields may come in any order, elder after the file included, and purpose is any string", async () => {
    expect(
      (await upload(`Bearer ${token}`, parts([file(), text("purpose", "🩺 review\u0000 <b>"), text("elder", ELDER)])))
        .status,
    ).toBe(202);
  });

  it("415 when the body is not multipart/form-data", async () => {
    const res = await upload(`Bearer ${token}`, JSON.stringify({ elder: ELDER, file: "aGVsbG8=" }), {
      "content-type": "application/json",
    });
    expectError(res, 415, "unsupported_media_type");
    expect(submitted).toBe(0);
  });

  it("400 for multipart that is not well-formed: no boundary, or a body that ends inside a part", async () => {
    const noBoundary = await upload(`Bearer ${token}`, "whatever", { "content-type": "multipart/form-data" });
    expect(noBoundary.status).toBe(400);
    expect(noBoundary.json.error.code).toBe("invalid_request");
    const truncated = await upload(
      `Bearer ${token}`,
      `--${BOUNDARY}\r\nContent-Disposition: form-data; name="elder"\r\n\r\n${ELDER}\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhello`,
    );
    expect(truncated.status).toBe(400);
    expect(truncated.json.error.code).toBe("invalid_request");
  });

  it.each([
    ["longer than 255 characters", "k".repeat(256)],
    ["empty", ""],
  ])("400 when Idempotency-Key is %s", async (_name, key) => {
    expectError(
      await upload(`Bearer ${token}`, undefined, { "idempotency-key": key }),
      400,
      "invalid_request",
      "Idempotency-Key",
    );
    expect(submitted).toBe(0);
  });

  it("an Idempotency-Key of exactly 255 characters is accepted", async () => {
    expect((await upload(`Bearer ${token}`, undefined, { "idempotency-key": "k".repeat(255) })).status).toBe(202);
  });

  it("401 without a valid bearer, on POST /v1/files and GET /v1/files/{id}", async () => {
    expectError(await upload("Bearer not-a-token"), 401, "unauthorized");
    expectError(await upload(undefined), 401, "unauthorized");
    expectError(await edge.send("GET", `/v1/files/${FILE}`), 401, "unauthorized");
    expect(submitted).toBe(0);
  });

  it("403 insufficient_scope on POST /v1/files and GET /v1/files/{id} with a token granted only connections:write", async () => {
    expectError(await upload(`Bearer ${connectionsOnly}`), 403, "insufficient_scope");
    expectError(
      await edge.send("GET", `/v1/files/${FILE}`, { headers: { authorization: `Bearer ${connectionsOnly}` } }),
      403,
      "insufficient_scope",
    );
    expect(submitted).toBe(0);
  });
});

describe("POST /v1/files order of checks at the edge", () => {
  it("authentication before scope before the body", async () => {
    const notMultipart = { "content-type": "application/json" };
    expectError(await upload("Bearer bad", JSON.stringify({ not: "multipart" }), notMultipart), 401, "unauthorized");
    expectError(
      await upload(`Bearer ${connectionsOnly}`, JSON.stringify({ not: "multipart" }), notMultipart),
      403,
      "insufficient_scope",
    );
  });

  it("the request's headers before its body: a bad Idempotency-Key wins over a missing elder", async () => {
    expectError(
      await upload(`Bearer ${token}`, multipart([]), { "idempotency-key": "k".repeat(300) }),
      400,
      "invalid_request",
      "Idempotency-Key",
    );
    expect(submitted).toBe(0);
  });
});
