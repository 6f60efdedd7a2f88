// A valid, text-heavy PDF of about `bytes` bytes, built in memory: many pages of plain text lines
// between drawing operators, the shape of a long scanned-and-OCRed report, so that extracting its
// text makes pdf.js parse every page's content stream.

const LINE = "Patient chart note: blood pressure 128/82, pulse 72, medication reviewed, follow-up in 2 weeks.";

/** A PDF of at most `bytes` bytes (and close to it), every line of text `line` (ASCII, no parentheses or backslash) and its place. */
export function textPdf(bytes: number, line = LINE): Buffer {
  let pages = Math.max(1, Math.floor(bytes / 8000));
  for (;;) {
    const pdf = build(pages, line);
    if (pdf.length <= bytes || pages === 1) return pdf;
    const perPage = pdf.length / pages;
    pages = Math.max(1, Math.floor(bytes / perPage) - 1);
  }
}

function build(pages: number, line: string): Buffer {
  const pageStream = (page: number) => {
    const ops: string[] = [];
    for (let y = 760, n = 0; y > 40; y -= 12, n++) {
      ops.push(`0.${n % 10} g 36 ${y - 2} 540 0.5 re f`);
      ops.push(`BT /F1 9 Tf 40 ${y} Td (${line} p${page} l${n}) Tj ET`);
    }
    return ops.join("\n");
  };
  const chunks: Buffer[] = [];
  const offsets: number[] = [];
  let length = 0;
  const push = (s: string) => {
    const b = Buffer.from(s, "latin1");
    chunks.push(b);
    length += b.length;
  };
  const object = (n: number, body: string) => {
    offsets[n] = length;
    push(`${n} 0 obj\n${body}\nendobj\n`);
  };
  // 1 catalog, 2 page tree, 3 font, then a page and its content stream per page.
  const pageObj = (i: number) => 4 + 2 * i;
  push("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n");
  object(1, "<< /Type /Catalog /Pages 2 0 R >>");
  object(
    2,
    `<< /Type /Pages /Count ${pages} /Kids [${Array.from({ length: pages }, (_, i) => `${pageObj(i)} 0 R`).join(" ")}] >>`,
  );
  object(3, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>");
  for (let i = 0; i < pages; i++) {
    const content = pageStream(i + 1);
    object(
      pageObj(i),
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents ${pageObj(i) + 1} 0 R >>`,
    );
    object(pageObj(i) + 1, `<< /Length ${Buffer.byteLength(content, "latin1")} >>\nstream\n${content}\nendstream`);
  }
  const count = pageObj(pages);
  const xref = length;
  push(`xref\n0 ${count}\n0000000000 65535 f \n`);
  for (let n = 1; n < count; n++) push(`${String(offsets[n]).padStart(10, "0")} 00000 n \n`);
  push(`trailer\n<< /Size ${count} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`);
  return Buffer.concat(chunks, length);
}
