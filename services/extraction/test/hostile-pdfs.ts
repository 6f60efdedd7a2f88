import { constants, deflateRawSync, deflateSync } from "node:zlib";

// PDFs built in the tests, for the extraction limits: one page whose content stream is given.

const MiB = 1024 * 1024;

/** A one-page PDF with a correct cross-reference table; `filters` name the content stream's encoding. */
export function onePagePdf(content: Buffer, filters: string[] = []): Buffer {
  const filter = filters.length ? ` /Filter [${filters.map((f) => `/${f}`).join(" ")}]` : "";
  const objects = [
    Buffer.from("<< /Type /Catalog /Pages 2 0 R >>"),
    Buffer.from("<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
    Buffer.from(
      "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
    ),
    Buffer.concat([
      Buffer.from(`<< /Length ${content.length}${filter} >>\nstream\n`),
      content,
      Buffer.from("\nendstream"),
    ]),
    Buffer.from("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"),
  ];
  const parts: Buffer[] = [Buffer.from("%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "latin1")];
  const offsets: number[] = [];
  let at = parts[0]!.length;
  objects.forEach((body, i) => {
    offsets.push(at);
    const obj = Buffer.concat([Buffer.from(`${i + 1} 0 obj\n`), body, Buffer.from("\nendobj\n")]);
    parts.push(obj);
    at += obj.length;
  });
  const xref = [
    `xref\n0 ${objects.length + 1}\n`,
    "0000000000 65535 f \n",
    ...offsets.map((o) => `${String(o).padStart(10, "0")} 00000 n \n`),
  ].join("");
  parts.push(Buffer.from(`${xref}trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${at}\n%%EOF\n`));
  return Buffer.concat(parts);
}

/**
 * zlib data that inflates to `mib` MiB of zeros, built without deflating them all: one MiB
 * compressed once and ended by a full flush (which resets the compressor, so the block is the same
 * every time), repeated, then the final block and the Adler-32 of the whole.
 */
export function flateBomb(mib: number): Buffer {
  const block = deflateRawSync(Buffer.alloc(MiB), { level: 9, finishFlush: constants.Z_FULL_FLUSH });
  const end = deflateRawSync(Buffer.alloc(0));
  const adler = Buffer.alloc(4);
  adler.writeUInt32BE((((mib * MiB) % 65521) * 65536 + 1) >>> 0);
  return Buffer.concat([Buffer.from([0x78, 0xda]), ...Array<Buffer>(mib).fill(block), end, adler]);
}

/** A page whose content stream inflates to `mib` MiB (the stream itself is about 1 KB per MiB). */
export const flateBombPdf = (mib = 500) => onePagePdf(flateBomb(mib), ["FlateDecode"]);

/** The same bomb compressed once more: [/FlateDecode /FlateDecode], a few KB. */
export const chainedFlateBombPdf = (mib = 500) =>
  onePagePdf(deflateSync(flateBomb(mib), { level: 9 }), ["FlateDecode", "FlateDecode"]);

/** A page of `count` text-showing operators (each a few bytes once compressed). */
export function manyOperatorsPdf(count: number): Buffer {
  const op = Buffer.from("BT /F1 12 Tf 72 720 Td (x) Tj ET\n");
  return onePagePdf(deflateSync(Buffer.concat(Array<Buffer>(count).fill(op)), { level: 1 }), ["FlateDecode"]);
}

/** A readable PDF of about `mib` MiB: one page of text, uncompressed. */
export function largeTextPdf(mib: number): Buffer {
  const line = Buffer.from("BT /F1 10 Tf 40 700 Td (Blood pressure within range; continue the current plan.) Tj ET\n");
  return onePagePdf(Buffer.concat(Array<Buffer>(Math.ceil((mib * MiB) / line.length)).fill(line)));
}

/** The bomb behind a second filter: [/ASCIIHexDecode /FlateDecode], about 2 KB of hex per MiB decoded. */
export const hexFlateBombPdf = (mib = 1024) =>
  onePagePdf(Buffer.from(flateBomb(mib).toString("hex")), ["ASCIIHexDecode", "FlateDecode"]);

/** A PDF of about `mib` MiB whose one page is millions of drawing operators, uncompressed (nothing to decode). */
export function drawingOperatorsPdf(mib: number): Buffer {
  const ops = Buffer.from("10 10 m 20 20 l S\n");
  return onePagePdf(Buffer.concat(Array<Buffer>(Math.ceil((mib * MiB) / ops.length)).fill(ops)));
}

/**
 * The issue's quadratic PDF: `1 0 obj <</Subtype /Image>> stream` over and over, no `endstream`,
 * about `bytes` long. A check that looks for `endstream` from every `stream` reads the rest of the
 * file at each one.
 */
export function unterminatedStreamsPdf(bytes: number): Buffer {
  const unit = Buffer.from("1 0 obj <</Subtype /Image>> stream\n");
  return Buffer.concat([Buffer.from("%PDF-1.7\n"), ...Array<Buffer>(Math.ceil(bytes / unit.length)).fill(unit)]);
}
