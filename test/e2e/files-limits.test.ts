import v8 from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { connectedPartner, generatedText, sendFile, withFileDb, type ConnectedPartner } from "../support/files.js";

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

const blobsStored = () => withFileDb(stack.settings, (db) => db.collection("blobs.files").countDocuments());

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

it("memory stays bounded: four concurrent 25 MiB uploads hold far less than the bytes in flight", async () => {
  const max = stack.settings.MAX_FILE_BYTES;
  // Gateway, file-intake and this client share the process. What the process holds is sampled
  // after a forced garbage collection, so garbage not yet collected does not count: a server that
  // kept each file whole would hold the 100 MiB in flight near the end; one that streams holds a
  // few chunks per upload. RSS, which also counts the allocator's slack, gets a generous bound.
  v8.setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  expect((await sendFile(stack.baseUrl, p.token, p.elder, generatedText(max))).status).toBe(202); // warm-up
  gc();
  const held = () => {
    const m = process.memoryUsage();
    return m.heapUsed + m.arrayBuffers;
  };
  const baseline = { held: held(), rss: process.memoryUsage().rss };
  const peak = { ...baseline };
  const sampler = setInterval(() => {
    gc();
    peak.held = Math.max(peak.held, held());
    peak.rss = Math.max(peak.rss, process.memoryUsage().rss);
  }, 200);
  try {
    const results = await Promise.all(Array.from({ length: 4 }, () => sendFile(stack.baseUrl, p.token, p.elder, generatedText(max))));
    expect(results.map((r) => r.status)).toEqual([202, 202, 202, 202]);
  } finally {
    clearInterval(sampler);
  }
  expect(peak.held - baseline.held).toBeLessThan(max * 2);
  expect(peak.rss - baseline.rss).toBeLessThan(max * 6);
}, 240_000);
