import { afterAll, beforeAll, describe, expect, it, jest } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { call } from "../support/partner-api.js";
import { connectedPartner, extractionOf as storedExtraction, fixture, sendFile, waitForStatus, type ConnectedPartner } from "../support/files.js";
import { flateBombPdf } from "../../services/extraction/test/hostile-pdfs.js";

// A hostile PDF costs its extraction child, not the services: a FlateDecode bomb (a 0.5 MB file
// whose content stream inflates to 500 MB) ends `failed` within bounded time, and uploads and reads
// are served while it is being handled. Limits: services/extraction/src/extractor.ts.

jest.setTimeout(240_000);

let stack: TestStack;
let p: ConnectedPartner;

beforeAll(async () => {
  stack = await startTestStack();
  p = await connectedPartner(stack, "Hostile PDF Clinic");
});
afterAll(async () => {
  await stack?.stop();
});

const extractionOf = (id: string) => storedExtraction(stack.settings, id);

describe("a FlateDecode bomb", () => {
  it("ends failed within 2 minutes, while another upload and reads are served", async () => {
    const bomb = await sendFile(stack.baseUrl, p.token, p.elder, flateBombPdf(500));
    expect(bomb.status).toBe(202);
    const bombId = bomb.json!.id as string;
    const sentAt = Date.now();

    // While file-intake handles the bomb: another file is accepted and both can be read.
    const other = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.pdf"));
    expect(other.status).toBe(202);
    const otherId = other.json!.id as string;
    for (const id of [bombId, otherId]) {
      const read = await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`);
      expect(read.status).toBe(200);
    }

    const done = await waitForStatus(stack.baseUrl, p.token, bombId, ["processed", "failed"], 120_000);
    expect(done.json!.status).toBe("failed");
    expect(Date.now() - sentAt).toBeLessThan(120_000);
    expect(await extractionOf(bombId)).toMatchObject({ ok: false, kind: "pdf-text", error: expect.stringMatching(/^DecodedSizeExceeded/) });

    expect((await waitForStatus(stack.baseUrl, p.token, otherId, ["processed", "failed"])).json!.status).toBe("processed");
  });
});
