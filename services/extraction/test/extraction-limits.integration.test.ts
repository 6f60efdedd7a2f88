import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it, jest } from "@jest/globals";
import { DEFAULT_EXTRACTION_LIMITS, Extractor, ExtractorDied } from "../src/extractor.js";
import { drawingOperatorsPdf, flateBombPdf, hexFlateBombPdf, largeTextPdf, manyOperatorsPdf } from "./hostile-pdfs.js";

// Each file is decoded in a child process with a memory ceiling, a time limit and the decoded-size
// check (src/extractor.ts, src/decoded-size.ts). These tests use real children (the built child
// module: the integration lane builds first) and hostile PDFs built here; the size check alone is
// decoded-size.test.ts.

// A child loads pdf.js on its first PDF: seconds on a busy machine.
jest.setTimeout(120_000);

const fixture = (name: string) => readFileSync(new URL(`../../file-intake/test/fixtures/${name}`, import.meta.url));
const _MiB = 1024 * 1024;

const extractors: Extractor[] = [];
const extractor = (limits: Partial<typeof DEFAULT_EXTRACTION_LIMITS>) => {
  const e = new Extractor({ ...DEFAULT_EXTRACTION_LIMITS, ...limits });
  extractors.push(e);
  return e;
};
afterAll(() => Promise.all(extractors.map((e) => e.close())));
const extract = (type: string, bytes: Uint8Array) => extractor({}).extract(type, bytes);

async function timed<T>(run: () => Promise<T>): Promise<{ result: T; ms: number }> {
  const started = performance.now();
  const result = await run();
  return { result, ms: performance.now() - started };
}

describe("pdf.js never loads in the process that talks to file-intake", () => {
  it("extracting a PDF leaves this thread's globals as they were", async () => {
    const push = Array.prototype.push;
    const parse = JSON.parse;
    const res = await extract("application/pdf", fixture("sample.pdf"));
    expect(res).toMatchObject({ ok: true, kind: "pdf-text", pages: 1 });
    // pdf.js's legacy build replaces both when it loads (measured: push 12x slower).
    expect(Array.prototype.push).toBe(push);
    expect(JSON.parse).toBe(parse);
  });

  it("leaves the caller's bytes usable (the child works on its own copy)", async () => {
    const bytes = fixture("sample.pdf");
    const copy = Buffer.from(bytes);
    await extract("application/pdf", bytes);
    expect(bytes.equals(copy)).toBe(true);
  });
});

describe("hostile PDFs end failed with their reason, quickly, and the child serves the next file", () => {
  it("a hex-wrapped FlateDecode bomb (a 2 MB file decoding to 1 GiB) fails on the decoded-size limit", async () => {
    const e = extractor({});
    const { result, ms } = await timed(() => e.extract("application/pdf", hexFlateBombPdf(1024)));
    expect(result).toEqual({
      ok: false,
      kind: "pdf-text",
      reason: "decoded_size",
      error: expect.stringMatching(/^DecodedSizeExceeded: (streams|a stream) decodes? to more than/),
    });
    expect(ms).toBeLessThan(30_000);
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a 24 MiB page of millions of drawing operators fails on the decoded-size limit of one stream", async () => {
    const e = extractor({});
    const { result } = await timed(() => e.extract("application/pdf", drawingOperatorsPdf(24)));
    expect(result).toMatchObject({
      ok: false,
      kind: "pdf-text",
      reason: "decoded_size",
      error: expect.stringMatching(/a stream decodes to more than/),
    });
  });

  it("a bomb the size check does not stop is stopped by the child's memory ceiling, and only the child dies", async () => {
    // The decoded-size check off: pdf.js inflates the 500 MB itself, outside the JS heap.
    const e = extractor({
      maxDecodedBytes: Number.MAX_SAFE_INTEGER,
      maxStreamBytes: Number.MAX_SAFE_INTEGER,
      memoryCeilingMb: 160,
    });
    const { result } = await timed(() => e.extract("application/pdf", flateBombPdf(500)));
    expect(result).toEqual({
      ok: false,
      kind: "pdf-text",
      reason: "memory_limit",
      error: expect.stringMatching(/more than 160 MiB|heap/),
    });
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a page of millions of operators fails on the time limit when the size check lets it through", async () => {
    const e = extractor({
      timeoutMs: 3_000,
      maxDecodedBytes: Number.MAX_SAFE_INTEGER,
      maxStreamBytes: Number.MAX_SAFE_INTEGER,
    });
    const pdf = manyOperatorsPdf(2_000_000);
    const { result, ms } = await timed(() => e.extract("application/pdf", pdf));
    expect(result).toMatchObject({ ok: false, kind: "pdf-text" });
    expect((result as { reason: string }).reason).toMatch(/^(time_limit|memory_limit)$/);
    expect(ms).toBeLessThan(3_000 + 10_000);
    expect(await e.extract("text/plain", Buffer.from("still here"))).toEqual({
      ok: true,
      kind: "plain-text",
      textLength: 10,
    });
  });

  it("a file that keeps the child's core busy fails on the CPU-time limit, long before the wall clock's", async () => {
    const e = extractor({ cpuTimeMs: 300, timeoutMs: 60_000 });
    const { result, ms } = await timed(() => e.extract("application/pdf", largeTextPdf(4)));
    expect(result).toEqual({
      ok: false,
      kind: "pdf-text",
      reason: "time_limit",
      error: "extraction used more than 300 ms of CPU time",
    });
    expect(ms).toBeLessThan(30_000);
    expect(await e.extract("text/plain", Buffer.from("still here"))).toEqual({
      ok: true,
      kind: "plain-text",
      textLength: 10,
    });
  });

  it("a child killed by anything else (the kernel's OOM killer) is reported as ExtractorDied, and replaced", async () => {
    const e = extractor({ maxDecodedBytes: Number.MAX_SAFE_INTEGER, maxStreamBytes: Number.MAX_SAFE_INTEGER });
    const running = e.extract("application/pdf", manyOperatorsPdf(2_000_000));
    for (let i = 0; e.childPid === undefined && i < 100; i++) await new Promise((r) => setTimeout(r, 10));
    process.kill(e.childPid!, "SIGKILL");
    await expect(running).rejects.toBeInstanceOf(ExtractorDied);
    expect(await e.extract("text/plain", Buffer.from("next"))).toEqual({ ok: true, kind: "plain-text", textLength: 4 });
  });
});

describe("a large PDF", () => {
  // One page of 23 000 text operators: seconds of parsing, the worst case per byte.
  it("is parsed off this process: its event loop keeps turning meanwhile", async () => {
    const pdf = largeTextPdf(2);
    let longestGap = 0;
    let last = performance.now();
    const ticker = setInterval(() => {
      const now = performance.now();
      longestGap = Math.max(longestGap, now - last);
      last = now;
    }, 5);
    try {
      const { result, ms } = await timed(() => extract("application/pdf", pdf));
      expect(result).toMatchObject({ ok: true, kind: "pdf-text", pages: 1 });
      // The parse takes seconds; this thread never stalls for a sizeable part of it.
      expect(longestGap).toBeLessThan(Math.max(250, ms / 4));
    } finally {
      clearInterval(ticker);
    }
  });
});

describe("types without an extraction", () => {
  it("an unsupported type is refused without a child", async () => {
    expect(await extract("application/zip", Buffer.from("PK"))).toEqual({
      ok: false,
      kind: "plain-text",
      reason: "unsupported_type",
      error: "no extraction for application/zip",
    });
  });
});
