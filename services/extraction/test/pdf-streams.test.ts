import { describe, expect, it } from "@jest/globals";
import { MalformedStream, pdfStreams, type PdfStream, type Work } from "../src/pdf-streams.js";
import { unterminatedStreamsPdf } from "./hostile-pdfs.js";

// The stream pass (src/pdf-streams.ts), pure: each stream with its own dictionary, in work linear
// in the file's size. What the streams decode to: decoded-size.test.ts.

const pdf = (...parts: string[]) => Buffer.from(parts.join(""), "latin1");
const streams = (bytes: Buffer, work?: Work) => [...pdfStreams(bytes, work)];
const data = (bytes: Buffer, s: PdfStream) => bytes.toString("latin1", s.start, s.end);

describe("the streams of a PDF (pdfStreams)", () => {
  it("ends a stream's data at its /Length when endstream follows there, else at the next endstream", () => {
    const byLength = pdf("1 0 obj\n<< /Length 23 >>\nstream\nnot the endstream here\nendstream\nendobj\n");
    expect(streams(byLength).map((s) => data(byLength, s))).toEqual(["not the endstream here\n"]);
    const wrongLength = pdf("1 0 obj\n<< /Length 3 >>\nstream\nabcdef\nendstream\nendobj\n");
    expect(streams(wrongLength).map((s) => data(wrongLength, s))).toEqual(["abcdef\n"]);
    const byReference = pdf("1 0 obj\n<< /Length 9 0 R >>\nstream\r\nabc\r\nendstream\nendobj\n");
    expect(streams(byReference).map((s) => [data(byReference, s), s.dict.length])).toEqual([["abc\r\n", undefined]]);
    const unterminated = pdf("1 0 obj\n<< >>\nstream\nabc");
    expect(streams(unterminated).map((s) => [data(unterminated, s), s.terminated])).toEqual([["abc", false]]);
  });

  it("reads only the stream's own dictionary, at its top level: not comments, strings, nested dictionaries or the objects around it", () => {
    const dictOf = (dict: string) => streams(pdf(`4 0 obj\n${dict}\nstream\nx\nendstream\nendobj\n`))[0]!.dict;
    expect(dictOf("<< /DecodeParms << /Filter /DCTDecode /Subtype /Image >> /Filter /FlateDecode >>")).toMatchObject({
      filters: ["FlateDecode"],
      subtype: undefined,
    });
    expect(dictOf("<< /Filter /FlateDecode % /Subtype /Image\n>>")).toMatchObject({
      filters: ["FlateDecode"],
      subtype: undefined,
    });
    expect(dictOf("<< /Alt (/Subtype /Image >> stream) /Filter [/AHx /Fl] >>")).toMatchObject({
      filters: ["AHx", "Fl"],
      subtype: undefined,
    });
    expect(dictOf("<< /Filter /#46lateDecode /Subtype /Image /Length1 10 >>")).toEqual({
      filters: ["FlateDecode"],
      subtype: "Image",
      length1: true,
      length: undefined,
    });
    expect(dictOf("<< /Filter 7 0 R >>").filters).toBeNull();
    expect(dictOf("<< /Length 1 >>")).toEqual({ filters: [], subtype: undefined, length1: false, length: 1 });
    // The header on a line of its own, after an image object: only its own dictionary counts.
    const after = pdf(
      "5 0 obj << /Subtype /Image /Length 1 >> stream\nx\nendstream endobj\n4 0\nobj\n<< /Filter /FlateDecode >>\nstream\nx\nendstream\n",
    );
    expect(streams(after).map((s) => s.dict.subtype)).toEqual(["Image", undefined]);
  });

  it("a stream word in a content stream, a string or a comment is not a stream", () => {
    const bytes = pdf(
      "1 0 obj << /Title (Live stream) /Keywords (upstream stream) >> endobj\n% stream\n",
      "2 0 obj << /Length 5 0 R >> stream\nBT (the stream of) Tj ET\nendstream endobj\n",
    );
    expect(streams(bytes).map((s) => data(bytes, s))).toEqual(["BT (the stream of) Tj ET\n"]);
  });

  it("finds a stream inside another's data: an unterminated stream does not hide the objects after it", () => {
    const bytes = pdf(
      "1 0 obj <</Subtype /Image>> stream\nabc\n",
      "4 0 obj << /Filter /FlateDecode /Length 3 >> stream\nxyz\nendstream endobj\n",
    );
    expect(streams(bytes).map((s) => [s.dict.subtype ?? s.dict.filters!.join(), data(bytes, s)])).toEqual([
      ["Image", "abc\n4 0 obj << /Filter /FlateDecode /Length 3 >> stream\nxyz\n"],
      ["FlateDecode", "xyz"],
    ]);
  });

  it("ties a stream keyword to its object past headers inside its dictionary's strings, else refuses it (MalformedStream)", () => {
    // A header inside a string of the real dictionary: lexed from there, the dictionary is another; from the real one, it is found.
    const fake = pdf("4 0 obj << /Filter /Fl /X (0 obj [ \\( ) >> stream\nx\nendstream\n");
    expect(streams(fake).map((s) => s.dict.filters)).toEqual([["Fl"]]);
    // As pdf.js does, what is not a name where a key should be is skipped.
    expect(
      streams(pdf("4 0 obj << /X (a) ] /Filter /Fl >> stream\nx\nendstream\n")).map((s) => s.dict.filters),
    ).toEqual([["Fl"]]);
    // Its header out of reach behind headers in a string: refused, not skipped.
    expect(() =>
      streams(pdf("4 0 obj << /X (1 obj 1 obj 1 obj 1 obj 1 obj) /Filter /Fl >> stream\nx\nendstream\n")),
    ).toThrow(MalformedStream);
    expect(() => streams(pdf("%PDF-1.7\n<< /Filter /Fl >> stream\nx\nendstream\n"))).toThrow(
      /follows no object header/,
    );
    expect(() => streams(pdf("1 0 obj << /A 1 >> endobj\n% >> stream\n"))).toThrow(/not its object's/);
    expect(() => streams(pdf("4 0 obj << /A (", ">> stream\n".repeat(10), ") >> stream\nx\nendstream\n"))).toThrow(
      /too many/,
    );
  });

  // The work done, not the time it takes: bytes examined per byte of the file stay bounded.
  const adversaries: [string, (bytes: number) => Buffer][] = [
    ["the issue's `1 0 obj <</Subtype /Image>> stream`, repeated without endstream", unterminatedStreamsPdf],
    [
      "streams without /Length whose data is full of stream words",
      (n) =>
        pdf(
          "1 0 obj << >> stream\n"
            .concat("(a stream) Tj >> stream\n".repeat(20), "endstream endobj\n")
            .repeat(Math.ceil(n / 500)),
        ),
    ],
    ["many small streams", (n) => pdf("1 0 obj <</A 1 /Length 1>> stream\nx\nendstream\n".repeat(Math.ceil(n / 43)))],
    [
      "long dictionaries",
      (n) => pdf(`1 0 obj << /A [${"1 ".repeat(5000)}] >> stream\nx\nendstream\n`.repeat(Math.ceil(n / 10_040))),
    ],
    [
      "comments before stream keywords",
      (n) =>
        pdf(
          "1 0 obj << >> "
            .concat("%%%%%%%%%%%%%%%%%%%%%%%%%%%%%\n".repeat(20), "stream\nx\nendstream\n")
            .repeat(Math.ceil(n / 640)),
        ),
    ],
    [
      "stream keywords one after another on one long line",
      (n) => pdf("1 0 obj << >> stream\n", "%stream stream ".repeat(Math.ceil(n / 15))),
    ],
    ["object headers without end", (n) => pdf("1 0 obj (\n>> stream\n".repeat(Math.ceil(n / 19)))],
  ];
  it.each(adversaries)("is linear in the file's size: %s", (_, build) => {
    const perByte = (n: number) => {
      const bytes = build(n);
      const work = { bytes: 0 };
      try {
        streams(bytes, work);
      } catch (err) {
        if (!(err instanceof MalformedStream)) throw err;
      }
      return work.bytes / bytes.length;
    };
    const small = perByte(50_000);
    const large = perByte(800_000);
    expect(large).toBeLessThan(8);
    expect(large).toBeLessThan(small * 1.5 + 0.5);
  });
});
