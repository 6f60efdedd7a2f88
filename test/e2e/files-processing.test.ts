import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { connectedPartner, extractionOf as storedExtraction, fixture, SAMPLES, sendFile, waitForStatus, withFileDb, type ConnectedPartner } from "../support/files.js";

// After the 202: extraction of live files (results stored, never exposed), `failed` for bytes that
// cannot be parsed, and test files that run no extraction and still go received -> processed.

let stack: TestStack;
let p: ConnectedPartner;

beforeAll(async () => {
  stack = await startTestStack({ SANDBOX_APPROVAL_DELAY_SECONDS: "0" });
  p = await connectedPartner(stack, "Extraction Clinic");
});
afterAll(async () => {
  await stack?.stop();
});

const extractionOf = (id: string) => storedExtraction(stack.settings, id);

describe("live files", () => {
  const sent = new Map<string, string>();

  beforeAll(async () => {
    for (const name of [...SAMPLES, "corrupt.pdf"]) {
      const res = await sendFile(stack.baseUrl, p.token, p.elder, fixture(name), { purpose: "lab_result" });
      expect(res.json).toMatchObject({ status: "received" });
      sent.set(name, res.json!.id as string);
    }
  });

  it("every sample ends processed and the corrupt PDF ends failed", async () => {
    const statuses: Record<string, unknown> = {};
    for (const [name, id] of sent) statuses[name] = (await waitForStatus(stack.baseUrl, p.token, id, ["processed", "failed"])).json!.status;
    expect(statuses).toEqual({ ...Object.fromEntries(SAMPLES.map((s) => [s, "processed"])), "corrupt.pdf": "failed" });
  });

  it("extraction results are stored inside file-intake", async () => {
    for (const id of sent.values()) await waitForStatus(stack.baseUrl, p.token, id, ["processed", "failed"]);
    const pdf = await extractionOf(sent.get("sample.pdf")!);
    expect(pdf).toMatchObject({ ok: true, kind: "pdf-text", pages: 1 });
    expect((pdf!.text as string).replace(/\s+/g, " ").trim()).toBe("Discharge summary: stable, follow up in 2 weeks");
    expect(await extractionOf(sent.get("sample.txt")!)).toMatchObject({ ok: true, kind: "plain-text", text: fixture("sample.txt").toString("utf8") });
    expect(await extractionOf(sent.get("sample.jpg")!)).toMatchObject({ ok: true, kind: "image-dimensions", width: 64, height: 48 });
    expect(await extractionOf(sent.get("sample.png")!)).toMatchObject({ ok: true, kind: "image-dimensions", width: 64, height: 48 });
    expect(await extractionOf(sent.get("sample.heic")!)).toMatchObject({ ok: true, kind: "image-dimensions", width: 64 });
    for (const audio of ["sample.wav", "sample.mp3", "sample.m4a"]) {
      const res = await extractionOf(sent.get(audio)!);
      expect(res).toMatchObject({ ok: true, kind: "audio-duration" });
      expect(Math.abs((res!.durationSeconds as number) - 1)).toBeLessThan(0.2);
    }
    expect(await extractionOf(sent.get("corrupt.pdf")!)).toMatchObject({ ok: false, kind: "pdf-text", error: expect.any(String) });
  });

  it("extraction results are never exposed: the file resource is {id, status} and nothing else", async () => {
    for (const id of sent.values()) {
      const res = await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`);
      expect(Object.keys(res.json!).sort()).toEqual(["id", "status"]);
      expect(res.json!.id).toBe(id);
      expect(res.text).not.toMatch(/Discharge|width|height|duration|text|pages|sha256/);
    }
  });
});

describe("test files", () => {
  it("run no extraction and move received -> processed, even bytes that would fail a live extraction", async () => {
    const testToken = await accessToken(stack.baseUrl, p.test.clientId, p.test.clientSecret);
    const sandbox = (await opsFor(stack.settings).info()).sandbox_elder_address;
    const con = await call(stack.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox });
    expect(con.status).toBe(202);
    const deadline = Date.now() + 30_000;
    while ((await call(stack.baseUrl, testToken, "GET", `/v1/connections/${con.json!.id}`)).json!.status !== "approved") {
      if (Date.now() > deadline) throw new Error("the sandbox connection was not approved");
      await new Promise((r) => setTimeout(r, 200));
    }

    for (const name of ["sample.pdf", "corrupt.pdf"]) {
      const res = await sendFile(stack.baseUrl, testToken, sandbox, fixture(name));
      expect(res.status).toBe(202);
      expect(res.json!.status).toBe("received");
      const id = res.json!.id as string;
      expect((await waitForStatus(stack.baseUrl, testToken, id, ["processed", "failed"])).json!.status).toBe("processed");
      expect(await extractionOf(id)).toBeNull();
      expect(await withFileDb(stack.settings, (db) => db.collection("files").findOne({ _id: id as never }))).toMatchObject({ mode: "test", status: "processed" });
    }
  });
});
