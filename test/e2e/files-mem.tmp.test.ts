import { afterAll, beforeAll, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { connectedPartner, generatedText, sendFile } from "../support/files.js";

let stack: TestStack;
beforeAll(async () => { stack = await startTestStack(); });
afterAll(async () => { await stack?.stop(); });

async function measure(n: number, size: number) {
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  const s = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss); }, 10);
  const p = await connectedPartner(stack);
  const t = Date.now();
  const res = await Promise.all(Array.from({ length: n }, () => sendFile(stack.baseUrl, p.token, p.elder, generatedText(size))));
  clearInterval(s);
  console.log(n, size, res.map(r => r.status).join(","), "peak delta MB", ((peak - baseline) / 1048576).toFixed(1), "ms", Date.now() - t, "rss MB", (process.memoryUsage().rss/1048576).toFixed(0));
}
it("mem", async () => {
  await measure(1, 25 * 1024 * 1024);
  await measure(1, 25 * 1024 * 1024);
  await measure(1, 5 * 1024 * 1024);
  await measure(4, 25 * 1024 * 1024);
  await measure(1, 25 * 1024 * 1024);
  expect(1).toBe(1);
}, 300_000);
