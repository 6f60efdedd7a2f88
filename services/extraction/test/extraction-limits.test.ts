import { readFileSync } from "node:fs";
import { deflateSync } from "node:zlib";
import { afterAll, describe, expect, it, jest } from "@jest/globals";
import { checkDecodedSize, DecodedSizeExceeded, filtersOf } from "../src/decoded-size.js";
import { DEFAULT_EXTRACTION_LIMITS, Extractor, ExtractorDied } from "../src/extractor.js";
import { chainedFlateBombPdf, drawingOperatorsPdf, flateBomb, flateBombPdf, hexFlateBombPdf, largeTextPdf, manyOperatorsPdf, onePagePdf } from "./hostile-pdfs.js";

// Each file is decoded in a child process with a memory ceiling, a time limit and the decoded-size
// check (src/extractor.ts, src/decoded-size.ts). These tests use real children (the built child
// module: npm test builds first) and hostile PDFs built here.

// A child loads pdf.js on its first PDF: seconds on a busy machine.
jest.setTimeout(120_000);

const fixture = (name: string) => readFileSync(new URL(`../../file-intake/test/fixtures/${name}`, import.meta.url));
const MiB = 1024 * 1024;

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

describe("the decoded-size limit (checkDecodedSize)", () => {
  it("counts what every stream decodes to, and a stream without filters its length", async () => {
    const content = Buffer.from("BT /F1 12 Tf 72 720 Td (hello) Tj ET\n".repeat(1000));
    expect(await checkDecodedSize(onePagePdf(deflateSync(content), ["FlateDecode"]), 10 * MiB)).toBe(content.length);
    // The stored length: the content and the end of line before `endstream`.
    expect(await checkDecodedSize(onePagePdf(content), 10 * MiB)).toBe(content.length + 1);
  });

  it("reads the declared filter chain, abbreviations included; a chain it cannot read is null", () => {
    expect(filtersOf("<< /Length 5 /Filter /FlateDecode >>")).toEqual(["flate"]);
    expect(filtersOf("<< /Filter [/AHx /Fl] /Length 5 >>")).toEqual(["hex", "flate"]);
    expect(filtersOf("<< /Filter[/ASCII85Decode/LZWDecode] >>")).toEqual(["a85", "lzw"]);
    expect(filtersOf("<< /Length 5 >>")).toEqual([]);
    expect(filtersOf("<< /Filter 7 0 R >>")).toBeNull();
    expect(filtersOf("<< /Filter /Unheard >>")).toBeNull();
  });

  it("counts a Flate bomb behind any other filter: [/ASCIIHexDecode /FlateDecode] of 1 GiB (once counted as 0 bytes)", async () => {
    const bomb = hexFlateBombPdf(1024);
    expect(bomb.length).toBeLessThan(3 * MiB);
    await expect(checkDecodedSize(bomb, 64 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
    const a85 = onePagePdf(Buffer.concat([ascii85(flateBomb(256)), Buffer.from("~>")]), ["A85", "Fl"]);
    await expect(checkDecodedSize(a85, 64 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
    const small = onePagePdf(Buffer.from(deflateSync(Buffer.alloc(1000, 0x20)).toString("hex") + ">"), ["ASCIIHexDecode", "FlateDecode"]);
    expect(await checkDecodedSize(small, MiB)).toBeGreaterThanOrEqual(1000);
  });

  it("counts what RunLength and LZW expand to", async () => {
    // RunLength: 2 bytes (257 - 129 = 128 copies of one byte) each.
    const rl = onePagePdf(Buffer.concat([Buffer.alloc(2 * 300_000).fill(Buffer.from([129, 0x41])), Buffer.from([128])]), ["RunLengthDecode"]);
    await expect(checkDecodedSize(rl, 16 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
    expect(await checkDecodedSize(rl, 64 * MiB)).toBe(300_000 * 128);
    // LZW: "ABABABA" from the spec's example codes 65 66 258 260 then EOD (9 bits each).
    const codes = [256, 65, 66, 258, 260, 257];
    let bits = "";
    for (const c of codes) bits += c.toString(2).padStart(9, "0");
    bits = bits.padEnd(Math.ceil(bits.length / 8) * 8, "0");
    const lzw = Buffer.from(bits.match(/.{8}/g)!.map((b) => parseInt(b, 2)));
    expect(await checkDecodedSize(onePagePdf(lzw, ["LZWDecode"]), MiB)).toBe(7);
  });

  it("bounds each stream but a font's on its own: one page of 9 MiB fails, 9 MiB over many pages does not", async () => {
    const page = Buffer.from("10 10 m 20 20 l S\n".repeat(Math.ceil((9 * MiB) / 18)));
    await expect(checkDecodedSize(onePagePdf(page), 256 * MiB, 8 * MiB)).rejects.toThrow(/a stream decodes to more than 8388608 bytes/);
    const pages = Buffer.concat(Array.from({ length: 9 }, () => onePagePdf(Buffer.alloc(MiB, 0x20))));
    expect(await checkDecodedSize(pages, 256 * MiB, 8 * MiB)).toBeGreaterThan(9 * MiB);
    const font = Buffer.concat([Buffer.from("7 0 obj\n<< /Length1 9437184 /Filter /FlateDecode >>\nstream\n"), deflateSync(Buffer.alloc(9 * MiB)), Buffer.from("\nendstream\nendobj\n")]);
    expect(await checkDecodedSize(font, 256 * MiB, 8 * MiB)).toBe(9 * MiB);
  });

  it("skips images (text extraction never decodes them)", async () => {
    const image = Buffer.from("<< /Type /XObject /Subtype /Image /Width 1 /Height 1 /Filter /FlateDecode >>\nstream\n");
    const pdf = Buffer.concat([Buffer.from("1 0 obj\n"), image, flateBomb(64), Buffer.from("\nendstream\nendobj\n")]);
    expect(await checkDecodedSize(pdf, MiB)).toBe(0);
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

describe("hostile PDFs end failed with their reason, quickly, and the child serves the next file", () => {
  it("a hex-wrapped FlateDecode bomb (a 2 MB file decoding to 1 GiB) fails on the decoded-size limit", async () => {
    const e = extractor({});
    const { result, ms } = await timed(() => e.extract("application/pdf", hexFlateBombPdf(1024)));
    expect(result).toEqual({ ok: false, kind: "pdf-text", reason: "decoded_size", error: expect.stringMatching(/^DecodedSizeExceeded: (streams|a stream) decodes? to more than/) });
    expect(ms).toBeLessThan(30_000);
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a 24 MiB page of millions of drawing operators fails on the decoded-size limit of one stream", async () => {
    const e = extractor({});
    const { result } = await timed(() => e.extract("application/pdf", drawingOperatorsPdf(24)));
    expect(result).toMatchObject({ ok: false, kind: "pdf-text", reason: "decoded_size", error: expect.stringMatching(/a stream decodes to more than/) });
  });

  it("a bomb the size check does not stop is stopped by the child's memory ceiling, and only the child dies", async () => {
    // The decoded-size check off: pdf.js inflates the 500 MB itself, outside the JS heap.
    const e = extractor({ maxDecodedBytes: Number.MAX_SAFE_INTEGER, maxStreamBytes: Number.MAX_SAFE_INTEGER, memoryCeilingMb: 160 });
    const { result } = await timed(() => e.extract("application/pdf", flateBombPdf(500)));
    expect(result).toEqual({ ok: false, kind: "pdf-text", reason: "memory_limit", error: expect.stringMatching(/more than 160 MiB|heap/) });
    expect(await e.extract("application/pdf", fixture("sample.pdf"))).toMatchObject({ ok: true, pages: 1 });
  });

  it("a page of millions of operators fails on the time limit when the size check lets it through", async () => {
    const e = extractor({ timeoutMs: 3_000, maxDecodedBytes: Number.MAX_SAFE_INTEGER, maxStreamBytes: Number.MAX_SAFE_INTEGER });
    const pdf = manyOperatorsPdf(2_000_000);
    const { result, ms } = await timed(() => e.extract("application/pdf", pdf));
    expect(result).toMatchObject({ ok: false, kind: "pdf-text" });
    expect((result as { reason: string }).reason).toMatch(/^(time_limit|memory_limit)$/);
    expect(ms).toBeLessThan(3_000 + 10_000);
    expect(await e.extract("text/plain", Buffer.from("still here"))).toEqual({ ok: true, kind: "plain-text", text: "still here", textLength: 10, textTruncated: false });
  });

  it("a child killed by anything else (the kernel's OOM killer) is reported as ExtractorDied, and replaced", async () => {
    const e = extractor({ maxDecodedBytes: Number.MAX_SAFE_INTEGER, maxStreamBytes: Number.MAX_SAFE_INTEGER });
    const running = e.extract("application/pdf", manyOperatorsPdf(2_000_000));
    for (let i = 0; e.childPid === undefined && i < 100; i++) await new Promise((r) => setTimeout(r, 10));
    process.kill(e.childPid!, "SIGKILL");
    await expect(running).rejects.toBeInstanceOf(ExtractorDied);
    expect(await e.extract("text/plain", Buffer.from("next"))).toMatchObject({ ok: true, text: "next" });
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
    expect(await extract("application/zip", Buffer.from("PK"))).toEqual({ ok: false, kind: "plain-text", reason: "unsupported_type", error: "no extraction for application/zip" });
  });
});

/** ASCII85 (no 'z' shortcut), for the filter-chain tests. */
function ascii85(bytes: Buffer): Buffer {
  let out = "";
  for (let i = 0; i < bytes.length; i += 4) {
    const group = Buffer.alloc(4);
    bytes.copy(group, 0, i, Math.min(i + 4, bytes.length));
    let v = group.readUInt32BE(0);
    const chars: string[] = [];
    for (let k = 0; k < 5; k++) {
      chars.unshift(String.fromCharCode((v % 85) + 33));
      v = Math.floor(v / 85);
    }
    out += chars.slice(0, Math.min(5, bytes.length - i + 1)).join("");
  }
  return Buffer.from(out, "latin1");
}
