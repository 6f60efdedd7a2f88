import { deflateSync } from "node:zlib";
import { describe, expect, it } from "@jest/globals";
import { chainOf, checkDecodedSize, DecodedSizeExceeded } from "../src/decoded-size.js";
import {
  bombWithDictionaryPdf,
  chainedFlateBombPdf,
  flateBomb,
  flateBombPdf,
  hexFlateBombPdf,
  onePagePdf,
  unterminatedStreamsPdf,
} from "./hostile-pdfs.js";

// The decoded-size check (src/decoded-size.ts), pure: every PDF filter chain is bounded before a
// child decodes it. The children themselves: extraction-limits.integration.test.ts.

const MiB = 1024 * 1024;

describe("the decoded-size limit (checkDecodedSize)", () => {
  it("counts what every stream decodes to, and a stream without filters its length", async () => {
    const content = Buffer.from("BT /F1 12 Tf 72 720 Td (hello) Tj ET\n".repeat(1000));
    expect(await checkDecodedSize(onePagePdf(deflateSync(content), ["FlateDecode"]), 10 * MiB)).toBe(content.length);
    // The stored length: the content, up to its /Length.
    expect(await checkDecodedSize(onePagePdf(content), 10 * MiB)).toBe(content.length);
  });

  it("reads the declared filter chain, abbreviations included; a chain it cannot read is null", () => {
    expect(chainOf(["FlateDecode"])).toEqual(["flate"]);
    expect(chainOf(["AHx", "Fl"])).toEqual(["hex", "flate"]);
    expect(chainOf(["ASCII85Decode", "LZWDecode"])).toEqual(["a85", "lzw"]);
    expect(chainOf([])).toEqual([]);
    expect(chainOf(null)).toBeNull();
    expect(chainOf(["Unheard"])).toBeNull();
  });

  // Text near a stream once decided how it was judged: each of these skipped or under-counted the bomb.
  it.each([
    [
      "a comment in its dictionary says /Subtype /Image",
      "<< /Length %LENGTH% /Filter /FlateDecode % /Subtype /Image\n>>",
    ],
    [
      "a string in its dictionary says /Subtype /Image",
      "<< /Length %LENGTH% /Alt (/Subtype /Image) /Filter /FlateDecode >>",
    ],
    [
      "a nested dictionary's /Filter /DCTDecode comes before its own /Filter",
      "<< /DecodeParms << /Filter /DCTDecode >> /Length %LENGTH% /Filter /FlateDecode >>",
    ],
    ["its filter's name is written with #xx", "<< /Length %LENGTH% /Filter /#46lateDecode >>"],
  ])("measures a Flate bomb whose dictionary is not an image's although %s", async (_, dictionary) => {
    await expect(checkDecodedSize(bombWithDictionaryPdf(dictionary), 256 * MiB, 8 * MiB)).rejects.toThrow(
      /a stream decodes to more than 8388608 bytes/,
    );
  });

  it("measures a Flate bomb whose header is on a line of its own after an image object", async () => {
    await expect(
      checkDecodedSize(
        bombWithDictionaryPdf("<< /Length %LENGTH% /Filter /FlateDecode >>", 64, "4 0\nobj\n"),
        256 * MiB,
        8 * MiB,
      ),
    ).rejects.toBeInstanceOf(DecodedSizeExceeded);
  });

  it("measures a Flate bomb after an unterminated image stream (its data runs over the bomb)", async () => {
    const pdf = Buffer.concat([
      unterminatedStreamsPdf(10_000),
      bombWithDictionaryPdf("<< /Length %LENGTH% /Filter /FlateDecode >>"),
    ]);
    await expect(checkDecodedSize(pdf, 256 * MiB, 8 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
  });

  it("refuses a PDF whose stream keyword it cannot tie to an object's dictionary (it cannot be measured)", async () => {
    const pdf = Buffer.from("%PDF-1.7\n<< /Filter /FlateDecode >>\nstream\nx\nendstream\n");
    await expect(checkDecodedSize(pdf, 256 * MiB, 8 * MiB)).rejects.toThrow(/cannot be measured/);
  });

  it("passes the issue's quadratic PDF (2.8 MB of `1 0 obj <</Subtype /Image>> stream`) in one pass over it", async () => {
    const pdf = unterminatedStreamsPdf(2_800_000);
    const work = { bytes: 0 };
    expect(await checkDecodedSize(pdf, 256 * MiB, 8 * MiB, work)).toBe(0);
    expect(work.bytes).toBeLessThan(4 * pdf.length);
  });

  it("counts a Flate bomb behind any other filter: [/ASCIIHexDecode /FlateDecode] of 1 GiB (once counted as 0 bytes)", async () => {
    const bomb = hexFlateBombPdf(1024);
    expect(bomb.length).toBeLessThan(3 * MiB);
    await expect(checkDecodedSize(bomb, 8 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
    const a85 = onePagePdf(Buffer.concat([ascii85(flateBomb(256)), Buffer.from("~>")]), ["A85", "Fl"]);
    await expect(checkDecodedSize(a85, 8 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
    const small = onePagePdf(Buffer.from(`${deflateSync(Buffer.alloc(1000, 0x20)).toString("hex")}>`), [
      "ASCIIHexDecode",
      "FlateDecode",
    ]);
    expect(await checkDecodedSize(small, MiB)).toBeGreaterThanOrEqual(1000);
  });

  it("counts what RunLength and LZW expand to", async () => {
    // RunLength: 2 bytes (257 - 129 = 128 copies of one byte) each.
    const rl = onePagePdf(
      Buffer.concat([Buffer.alloc(2 * 300_000).fill(Buffer.from([129, 0x41])), Buffer.from([128])]),
      ["RunLengthDecode"],
    );
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
    await expect(checkDecodedSize(onePagePdf(page), 256 * MiB, 8 * MiB)).rejects.toThrow(
      /a stream decodes to more than 8388608 bytes/,
    );
    const pages = Buffer.concat(Array.from({ length: 9 }, () => onePagePdf(Buffer.alloc(MiB, 0x20))));
    expect(await checkDecodedSize(pages, 256 * MiB, 8 * MiB)).toBe(9 * MiB);
    const font = Buffer.concat([
      Buffer.from("7 0 obj\n<< /Length1 9437184 /Filter /FlateDecode >>\nstream\n"),
      deflateSync(Buffer.alloc(9 * MiB)),
      Buffer.from("\nendstream\nendobj\n"),
    ]);
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
    await expect(checkDecodedSize(bomb, 8 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
  });

  it("counts chained filters ([/FlateDecode /FlateDecode]) at every level", async () => {
    const chained = chainedFlateBombPdf(500);
    expect(chained.length).toBeLessThan(64 * 1024);
    await expect(checkDecodedSize(chained, 8 * MiB)).rejects.toBeInstanceOf(DecodedSizeExceeded);
    const small = onePagePdf(deflateSync(deflateSync(Buffer.alloc(1000, 0x20))), ["FlateDecode", "FlateDecode"]);
    expect(await checkDecodedSize(small, MiB)).toBeGreaterThan(1000);
  });

  it("takes damaged zlib data as what it inflates to before the damage", async () => {
    const cut = deflateSync(Buffer.alloc(100_000, 0x41)).subarray(0, 60);
    expect(await checkDecodedSize(onePagePdf(cut, ["FlateDecode"]), MiB)).toBeLessThan(100_000);
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
