import { readFileSync } from "node:fs";
import { deflateSync } from "node:zlib";
import { afterAll, describe, expect, it, jest } from "@jest/globals";
import { checkDecodedSize, DecodedSizeExceeded } from "../src/decoded-size.js";
import { DEFAULT_EXTRACTION_LIMITS, extract, Extractor } from "../src/extraction.js";
import { chainedFlateBombPdf, flateBombPdf, largeTextPdf, manyOperatorsPdf, onePagePdf } from "./hostile-pdfs.js";

// Extraction runs in worker threads with time, heap, decoded-size and memory limits
// (src/extraction.ts). These tests use real threads (the built thread module: npm test builds
// first) and hostile PDFs built here.

// A thread loads pdf.js on its first PDF: seconds on a busy machine.
jest.setTimeout(120_000);

const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
const MiB = 1024 * 1024;

const extractors: Extractor[] = [];
const extractor = (limits: Partial<typeof DEFAULT_EXTRACTION_LIMITS>) => {
  const e = new Extractor({ ...DEFAULT_EXTRACTION_LIMITS, ...limits });
  extractors.push(e);
  return e;
};
afterAll(() => Promise.all(extractors.map((e) => e.close())));

async function timed<T>(run: () => Promise<T>): Promise<{ result: T; ms: number }> {
  const started = performance.now();
  const result = await run();
  return { result, ms: performance.now() - started };
}

describe("pdf.js never loads in the thread that serves the RPCs", () => {
  it("extracting a PDF leaves this thread's globals as they were", async () => {
    const push = Array.prototype.push;
    const parse = JSON.parse;
    const res = await extract("application/pdf", fixture("sample.pdf"));
    expect(res).toMatchObject({ ok: true, kind: "pdf-text", pages: 1 });
    // pdf.js's legacy build replaces both when it loads (measured: push 12x slower).
    expect(Array.prototype.push).toBe(push);
    expect(JSON.parse).toBe(parse);
  });

  it("leaves the caller's bytes usable (the thread works on its own copy)", async () => {
    const bytes = fixture("sample.pdf");
    const copy = Buffer.from(bytes);
    await extract("application/pdf", bytes);
    expect(bytes.equals(copy)).toBe(true);
  });
});

describe("the decoded-size limit (checkDecodedSize)", () => {
  it("counts what every zlib stream inflates to", async () => {
    const content = Buffer.from("BT /F1 12 Tf 72 720 Td (hello) Tj ET\n".repeat(1000));
    expect(await checkDecodedSize(onePagePdf(deflateSync(content), ["FlateDecode"]), 10 * MiB)).toBe(content.length);
    expect(await checkDecodedSize(onePagePdf(content), 10 * MiB)).toBe(0); // not compressed: nothing to inflate
  });

  it("stops a FlateDecode bomb at the limit without inflating the rest", async () => {
    const bomb = flateBombPdf(500);
    expect(bomb.length).toBeLessThan(1 * MiB);
    await expect(checkDecodedSize(bomb, 64 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
  });

  it("counts chained filters ([/FlateDecode /FlateDecode]) at every level", async () => {
    const chained = chainedFlateBombPdf(500);
    expect(chained.length).toBeLessThan(64 * 1024);
    await expect(checkDecodedSize(chained, 64 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
    const small = onePagePdf(deflateSync(deflateSync(Buffer.alloc(1000, 0x20))), ["FlateDecode", "FlateDecode"]);
    expect(await checkDecodedSize(small, MiB)).toBeGreaterThan(1000);
  });

  it("takes damaged zlib data as what it inflates to before the damage", async () => {
    const cut = deflateSync(Buffer.alloc(100_000, 0x41)).subarray(0, 60);
    expect(await checkDecodedSize(onePagePdf(cut, ["FlateDecode"]), MiB)).toBeLessThan(100_000);
  });
});

describe("hostile PDFs end failed, quickly, and the thread serves the next file", () => {
  it("a FlateDecode bomb (a ~0.5 MB file inflating to 500 MB) fails on the decoded-size limit", async () => {
    const e = extractor({});
    const { result, ms } = await timed(() => e.extract("application/pdf", flateBombPdf(500)));
    expect(result).toEqual({ ok: false, kind: "pdf-text", error: expect.stringMatching(/^DecodedSizeExceeded: streams decode to more than/) });
    expect(ms).toBeLessThan(30_000);
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a bomb the size check cannot see is stopped by the memory watch", async () => {
    // The decoded-size check off: pdf.js inflates the 500 MB itself, outside the JS heap.
    const e = extractor({ maxDecodedBytes: Number.MAX_SAFE_INTEGER, maxMemoryGrowthMb: 128 });
    const { result } = await timed(() => e.extract("application/pdf", flateBombPdf(500)));
    expect(result).toEqual({ ok: false, kind: "pdf-text", error: "extraction used more than 128 MiB" });
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a page of millions of operators fails on the time limit", async () => {
    const e = extractor({ timeoutMs: 3_000 });
    const pdf = manyOperatorsPdf(2_000_000);
    const { result, ms } = await timed(() => e.extract("application/pdf", pdf));
    expect(result).toMatchObject({ ok: false, kind: "pdf-text" });
    expect((result as { error: string }).error).toMatch(/longer than 3000 ms|MiB/);
    expect(ms).toBeLessThan(3_000 + 10_000);
    expect(await e.extract("text/plain", Buffer.from("still here"))).toMatchObject({ ok: true, text: "still here" });
  });

  it("a thread over its heap limit dies alone: the file fails, the process goes on", async () => {
    const e = extractor({ maxHeapMb: 24 });
    const result = await e.extract("application/pdf", manyOperatorsPdf(300_000));
    expect(result).toEqual({ ok: false, kind: "pdf-text", error: "extraction used more than 24 MiB of heap" });
  });
});

describe("a large PDF", () => {
  // One page of 23 000 text operators: seconds of parsing, the worst case per byte.
  it("is parsed off this thread: its event loop keeps turning meanwhile", async () => {
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
  it("an unsupported type is refused without a thread", async () => {
    expect(await extract("application/zip", Buffer.from("PK"))).toEqual({ ok: false, kind: "plain-text", error: "no extraction for application/zip" });
  });
});
