import { readFileSync } from "node:fs";
import { describe, expect, it } from "@jest/globals";
import { ACCEPTED_TYPES, recognise, SNIFF_BYTES, TextChecker } from "../src/rules/media-types.js";

const fixture = (name: string) => readFileSync(new URL(`../../file-intake/test/fixtures/${name}`, import.meta.url));

describe("accepted types are recognised from the bytes", () => {
  it.each([
    ["sample.pdf", "application/pdf"],
    ["corrupt.pdf", "application/pdf"],
    ["sample.txt", "text/plain"],
    ["sample.jpg", "image/jpeg"],
    ["sample.png", "image/png"],
    ["sample.heic", "image/heic"],
    ["sample.wav", "audio/wav"],
    ["sample.mp3", "audio/mpeg"],
    ["sample.m4a", "audio/mp4"],
  ])("%s is %s", async (name, mediaType) => {
    expect((await recognise(fixture(name)))?.mediaType).toBe(mediaType);
    // The decision needs only the first SNIFF_BYTES.
    expect((await recognise(fixture(name).subarray(0, SNIFF_BYTES)))?.mediaType).toBe(mediaType);
  });

  it.each(["unsupported.zip", "unsupported.elf"])("%s is refused", async (name) => {
    expect(await recognise(fixture(name))).toBeUndefined();
  });

  it("an MP3 whose ID3v2 tag is longer than the sniffed window is still an MP3", async () => {
    const mp3 = fixture("sample.mp3");
    const tagSize = ((mp3[6]! & 0x7f) << 21) | ((mp3[7]! & 0x7f) << 14) | ((mp3[8]! & 0x7f) << 7) | (mp3[9]! & 0x7f);
    const padding = 100_000;
    const size = Buffer.from([(padding >> 21) & 0x7f, (padding >> 14) & 0x7f, (padding >> 7) & 0x7f, padding & 0x7f]);
    const bigTag = Buffer.concat([
      Buffer.from("ID3"),
      Buffer.from([4, 0, 0]),
      size,
      Buffer.alloc(padding),
      mp3.subarray(10 + tagSize),
    ]);
    expect((await recognise(bigTag.subarray(0, SNIFF_BYTES)))?.mediaType).toBe("audio/mpeg");
  });

  it("a PDF's signature wins over a text-looking rest, and a ZIP's over its declared name", async () => {
    expect((await recognise(Buffer.from("%PDF-1.4\nplain words follow")))?.mediaType).toBe("application/pdf");
    expect(await recognise(Buffer.concat([fixture("unsupported.zip"), Buffer.from("hello")]))).toBeUndefined();
  });

  it("a text-based format other than plain text (XML) is refused", async () => {
    expect(
      await recognise(Buffer.from('<?xml version="1.0" encoding="UTF-8"?>\n<lab><result>ok</result></lab>\n')),
    ).toBeUndefined();
  });

  it("nothing is recognised in zero bytes", async () => {
    expect(await recognise(new Uint8Array(0))).toBeUndefined();
  });

  it("every accepted type has one media type and the set names each v1 type once", () => {
    const types = ACCEPTED_TYPES.map((t) => t.mediaType);
    expect(new Set(types).size).toBe(types.length);
    expect(types.sort()).toEqual([
      "application/pdf",
      "audio/mp4",
      "audio/mpeg",
      "audio/wav",
      "image/heic",
      "image/jpeg",
      "image/png",
      "text/plain",
    ]);
  });
});

describe("plain text is valid UTF-8 without binary control bytes", () => {
  const isText = async (bytes: Uint8Array) => (await recognise(bytes))?.mediaType === "text/plain";

  it("accepts UTF-8 with non-ASCII letters, tabs, CR LF, form feeds and a byte order mark", async () => {
    expect(await isText(Buffer.from("Grüße, 東京\tok\r\nnext page\f\n"))).toBe(true);
    expect(await isText(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from("bom first")]))).toBe(true);
  });

  it.each([
    ["a NUL byte", Buffer.from("abc\u0000def")],
    ["an escape byte", Buffer.from("colour \u001b[31m red")],
    ["a DEL byte", Buffer.from("abc\u007f")],
    ["Latin-1 (not UTF-8)", Buffer.from([0x47, 0x72, 0xfc, 0xdf, 0x65])],
    ["an overlong encoding", Buffer.from([0x41, 0xc0, 0xaf])],
    ["UTF-16 with a byte order mark", Buffer.from("\ufeffhello", "utf16le")],
  ])("refuses %s", async (_name, bytes) => {
    expect(await isText(bytes)).toBe(false);
  });

  it("checks chunk by chunk: a character may straddle two chunks; a file may not end inside one", () => {
    const bytes = Buffer.from("abc é def");
    const split = bytes.indexOf(0xc3) + 1; // between the two bytes of é
    const whole = new TextChecker();
    expect(whole.push(bytes.subarray(0, split))).toBe(true);
    expect(whole.push(bytes.subarray(split))).toBe(true);
    expect(whole.end()).toBe(true);

    const cut = new TextChecker();
    expect(cut.push(bytes.subarray(0, split))).toBe(true);
    expect(cut.end()).toBe(false);
  });

  it("stays refused once a bad byte was seen", () => {
    const checker = new TextChecker();
    expect(checker.push(Buffer.from("fine\n"))).toBe(true);
    expect(checker.push(Buffer.from([0x00]))).toBe(false);
    expect(checker.push(Buffer.from("fine again\n"))).toBe(false);
    expect(checker.end()).toBe(false);
  });
});

describe("the plain-text check decides as a whole-file UTF-8 decode would, however the bytes are cut", () => {
  // The rule stated the slow way: decode all of it strictly, then look for a binary control character.
  const reference = (bytes: Uint8Array) => {
    try {
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the binary control characters are what it looks for
      return !/[\u0000-\u0008\u000B\u000E-\u001F\u007F]/.test(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch {
      return false;
    }
  };
  const pieces = [
    "plain ascii\n",
    "\t\f\r\n",
    "é",
    "€",
    "😀",
    "\u{10FFFF}",
    "\uFEFF",
    "\u0085",
    [0x00],
    [0x07],
    [0x0b],
    [0x1b],
    [0x7f],
    [0xc0, 0x80],
    [0xed, 0xa0, 0x80],
    [0xf4, 0x90, 0x80, 0x80],
    [0xe2, 0x82],
    [0x80],
    [0xff],
    [0xf8, 0x88, 0x80, 0x80, 0x80],
  ].map((p) => (typeof p === "string" ? Buffer.from(p) : Buffer.from(p)));
  // A small deterministic generator, so a failure can be replayed.
  let seed = 42;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };

  it("on 2 000 generated files cut into random chunks", () => {
    for (let round = 0; round < 2000; round++) {
      const parts: Buffer[] = [];
      // Mostly good text, now and then one bad piece.
      for (let i = 0, n = 1 + random(12); i < n; i++) parts.push(pieces[random(round % 3 === 0 ? pieces.length : 8)]!);
      const bytes = Buffer.concat(parts);
      const checker = new TextChecker();
      let ok = true;
      for (let at = 0; at < bytes.length; ) {
        const len = random(6);
        ok = checker.push(bytes.subarray(at, at + len));
        at += len;
      }
      ok = checker.end() && ok;
      const length = ok ? checker.length : undefined;
      expect({ bytes: bytes.toString("hex"), ok, length }).toEqual({
        bytes: bytes.toString("hex"),
        ok: reference(bytes),
        length: reference(bytes) ? new TextDecoder().decode(bytes).length : undefined,
      });
    }
  });

  it("counts the text's length as a decode would: UTF-16 code units, a leading byte order mark not counted, a later one counted", () => {
    for (const text of ["", "plain", "é€", "a😀b", "\uFEFFhello", "\uFEFF", "x\uFEFFy", "\uFEFF\uFEFF😀"]) {
      const bytes = Buffer.from(text);
      for (let split = 0; split <= bytes.length; split++) {
        const checker = new TextChecker();
        checker.push(bytes.subarray(0, split));
        checker.push(bytes.subarray(split));
        expect({ text, split, ok: checker.end(), length: checker.length }).toEqual({
          text,
          split,
          ok: true,
          length: new TextDecoder().decode(bytes).length,
        });
      }
    }
  });

  it("a character cut at every place of a chunk boundary is still text; one cut off at the end is not", () => {
    const bytes = Buffer.from("a😀b€c");
    for (let split = 0; split <= bytes.length; split++) {
      const checker = new TextChecker();
      expect([checker.push(bytes.subarray(0, split)), checker.push(bytes.subarray(split)), checker.end()]).toEqual([
        true,
        true,
        true,
      ]);
    }
    const cut = new TextChecker();
    expect([cut.push(Buffer.from([0x61, 0xf0, 0x9f])), cut.push(Buffer.from([0x98])), cut.end()]).toEqual([
      true,
      true,
      false,
    ]);
  });
});
