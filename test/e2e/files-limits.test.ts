import { afterAll, beforeAll, expect, it } from "@jest/globals";
import { memoryOf, startGatewayProcess } from "../support/gateway-process.js";
import { startTestStack, type TestStack } from "../support/services.js";
import { connectedPartner, generatedText, sendFile, settledCounts, withFileDb, type ConnectedPartner } from "../support/files.js";

// The size limit at its exact byte, and the server's memory while 25 MiB files stream through. In a
// stack of their own: 25 MiB files make every scan of file-intake's database slow.

let stack: TestStack;
let p: ConnectedPartner;

beforeAll(async () => {
  stack = await startTestStack();
  p = await connectedPartner(stack);
});
afterAll(async () => {
  await stack?.stop();
});

/** Stored blobs once the refused upload's bytes are gone (they are deleted just after the refusal). */
const blobsStored = async () => (await settledCounts(stack.settings)).blobs;

it("a file of exactly MAX_FILE_BYTES (25 MiB) is accepted and one byte more is 413 file_too_large", async () => {
  const max = stack.settings.MAX_FILE_BYTES;
  expect(max).toBe(25 * 1024 * 1024);
  const before = { files: await withFileDb(stack.settings, (db) => db.collection("files").countDocuments()), blobs: await blobsStored() };
  const exact = await sendFile(stack.baseUrl, p.token, p.elder, generatedText(max));
  expect(exact.status).toBe(202);
  const over = await sendFile(stack.baseUrl, p.token, p.elder, generatedText(max + 1));
  expect({ status: over.status, body: over.json }).toEqual({
    status: 413,
    body: { error: { type: "invalid_request_error", code: "file_too_large", message: "The file is larger than the limit.", param: "file" } },
  });
  const after = { files: await withFileDb(stack.settings, (db) => db.collection("files").countDocuments()), blobs: await blobsStored() };
  expect({ files: after.files - before.files, blobs: after.blobs - before.blobs }).toEqual({ files: 1, blobs: 1 });
}, 180_000);

it("memory stays bounded: the gateway streams four concurrent 25 MiB uploads without holding them", async () => {
  const max = stack.settings.MAX_FILE_BYTES;
  // The gateway measured runs as a process of its own, so its resident memory is its own (the
  // services and this client share the test process). A gateway that kept each file whole would
  // grow by the 100 MiB in flight; one that streams holds a few chunks per upload.
  const gateway = await startGatewayProcess(stack.settings);
  try {
    expect((await sendFile(gateway.baseUrl, p.token, p.elder, generatedText(max))).status).toBe(202); // warm-up
    const baseline = memoryOf(gateway.pid).rss;
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, memoryOf(gateway.pid).rss);
    }, 50);
    try {
      const results = await Promise.all(Array.from({ length: 4 }, () => sendFile(gateway.baseUrl, p.token, p.elder, generatedText(max))));
      expect(results.map((r) => r.status)).toEqual([202, 202, 202, 202]);
    } finally {
      clearInterval(sampler);
    }
    peak = Math.max(peak, memoryOf(gateway.pid).rss);
    expect(peak - baseline).toBeLessThan((2 * max) / (1024 * 1024)); // MiB: under half of what is in flight
  } finally {
    await gateway.stop();
  }
}, 240_000);
