import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it, jest } from "@jest/globals";
import { DEFAULT_EXTRACTION_LIMITS, Extractor } from "../src/extractor.js";

// The extraction of each type, in the child process (the built child module: npm test builds first).

jest.setTimeout(60_000);
const fixture = (name: string) => readFileSync(new URL(`../../file-intake/test/fixtures/${name}`, import.meta.url));
const extractor = new Extractor();
const extract = (type: string, bytes: Uint8Array) => extractor.extract(type, bytes);
afterAll(() => extractor.close());

describe("extraction of live files", () => {
  it("finds the text of a PDF", async () => {
    const res = await extract("application/pdf", fixture("sample.pdf"));
    expect(res).toMatchObject({ ok: true, kind: "pdf-text", pages: 1, textTruncated: false });
    expect(res.ok && "text" in res && res.text.replace(/\s+/g, " ").trim()).toBe(
      "Discharge summary: stable, follow up in 2 weeks",
    );
  });

  it("fails a PDF that cannot be parsed", async () => {
    expect(await extract("application/pdf", fixture("corrupt.pdf"))).toMatchObject({
      ok: false,
      kind: "pdf-text",
      reason: "unparseable",
    });
  });

  it("measures a plain-text file (its text is the file: no copy)", async () => {
    const bytes = Buffer.from("\uFEFFcare note: é 😀\n");
    expect(await extract("text/plain", bytes)).toEqual({
      ok: true,
      kind: "plain-text",
      textLength: new TextDecoder().decode(bytes).length,
    });
  });

  it("caps the kept text of a PDF and records its full length", async () => {
    const capped = new Extractor({ ...DEFAULT_EXTRACTION_LIMITS, maxTextChars: 10 });
    try {
      const full = "Discharge summary: stable, follow up in 2 weeks";
      const res = await capped.extract("application/pdf", fixture("sample.pdf"));
      expect(res).toMatchObject({ ok: true, kind: "pdf-text", textTruncated: true, text: full.slice(0, 10) });
      expect(res.ok && "textLength" in res && res.textLength).toBeGreaterThanOrEqual(full.length);
    } finally {
      await capped.close();
    }
  });

  it.each([
    ["sample.jpg", "image/jpeg"],
    ["sample.png", "image/png"],
  ])("measures %s as 64x48", async (name, type) => {
    expect(await extract(type, fixture(name))).toEqual({ ok: true, kind: "image-dimensions", width: 64, height: 48 });
  });

  it("measures a HEIC image", async () => {
    const res = await extract("image/heic", fixture("sample.heic"));
    expect(res).toMatchObject({ ok: true, kind: "image-dimensions", width: 64 });
    expect(res.ok && "height" in res && res.height).toBeGreaterThanOrEqual(48);
  });

  it.each([
    ["sample.wav", "audio/wav"],
    ["sample.mp3", "audio/mpeg"],
    ["sample.m4a", "audio/mp4"],
  ])("finds the duration of %s (about 1 s)", async (name, type) => {
    const res = await extract(type, fixture(name));
    expect(res).toMatchObject({ ok: true, kind: "audio-duration" });
    const seconds = res.ok && "durationSeconds" in res ? res.durationSeconds : NaN;
    expect(seconds).toBeGreaterThan(0.9);
    expect(seconds).toBeLessThan(1.2);
  });

  it.each([
    ["image/png", Buffer.concat([fixture("sample.png").subarray(0, 16), Buffer.alloc(40)])],
    ["image/jpeg", Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0, 0, 0])],
    ["audio/wav", Buffer.concat([Buffer.from("RIFF"), Buffer.alloc(60, 7)])],
    [
      "audio/mpeg",
      Buffer.concat([Buffer.from("ID3"), Buffer.from([4, 0, 0, 0, 0, 0, 10]), Buffer.alloc(10), Buffer.alloc(100, 1)]),
    ],
  ])("fails %s bytes that cannot be parsed", async (type, bytes) => {
    expect(await extract(type, bytes)).toMatchObject({ ok: false, reason: "unparseable" });
  });
});
