import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it, jest } from "@jest/globals";
import { DEFAULT_EXTRACTION_LIMITS, Extractor, ExtractorDied } from "../src/extractor.js";
import {
  chainedFlateBombPdf,
  drawingOperatorsPdf,
  flateBombPdf,
  hexFlateBombPdf,
  largeTextPdf,
  manyOperatorsPdf,
} from "./hostile-pdfs.js";

// Each file is decoded in a child process with a memory ceiling and time limits (src/extractor.ts).
// These tests use real children (the built child module: the integration lane builds first) and
// hostile PDFs built in hostile-pdfs.ts.

// A child loads pdf.js on its first PDF: seconds on a busy machine.
jest.setTimeout(120_000);

const fixture = (name: string) => readFileSync(new URL(`../../file-intake/test/fixtures/${name}`, import.meta.url));

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
  // pdf.js decodes every filter chain into buffers of the child: a bomb meets the memory ceiling.
  it.each([
    ["a hex-wrapped FlateDecode bomb (a 2 MB file decoding to 1 GiB)", () => hexFlateBombPdf(1024)],
    ["a FlateDecode bomb (500 MiB)", () => flateBombPdf(500)],
    ["a bomb compressed twice ([/FlateDecode /FlateDecode], 500 MiB)", () => chainedFlateBombPdf(500)],
  ])("%s fails on the memory ceiling, and only the child dies", async (_name, pdf) => {
    const e = extractor({});
    const { result, ms } = await timed(() => e.extract("application/pdf", pdf()));
    expect(result).toEqual({
      ok: false,
      kind: "pdf-text",
      reason: "memory_limit",
      error: expect.stringMatching(/^extraction used more than (512 MiB|its heap)$/),
    });
    expect(ms).toBeLessThan(60_000);
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a 24 MiB page of millions of drawing operators fails on the CPU time of a page without text", async () => {
    const e = extractor({});
    expect(await e.extract("application/pdf", drawingOperatorsPdf(24))).toEqual({
      ok: false,
      kind: "pdf-text",
      reason: "time_limit",
      error: "page 1 has no text and used more than 500 ms of CPU time",
    });
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a page of millions of text operators fails on a limit of the child", async () => {
    const e = extractor({ timeoutMs: 3_000 });
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
    const e = extractor({});
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
