import { afterAll, beforeAll, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../test/support/services.js";
import { memoryOf, startGatewayProcess, type GatewayProcess } from "../test/support/gateway-process.js";
import { connectedPartner, generatedText, sendFile, type ConnectedPartner } from "../test/support/files.js";
import { report } from "./report.js";

// File uploads through the gateway: throughput for 1 MB and 25 MB files, and the gateway's memory
// while 8 uploads of 25 MB stream through at once. The gateway measured runs as a process of its
// own (the compiled services/gateway/dist/main.js, as `npm start` runs it), so its memory is its
// own; the internal services and the client share this process.

const MB = 1024 * 1024;
let stack: TestStack;
let gateway: GatewayProcess;
let baseUrl: string;
let p: ConnectedPartner;

beforeAll(async () => {
  stack = await startTestStack({ RATE_LIMIT_V1_PER_SECOND: "100000" });
  gateway = await startGatewayProcess(stack.settings);
  baseUrl = gateway.baseUrl;
  p = await connectedPartner(stack, "Bench Uploads");
}, 120_000);

afterAll(async () => {
  await gateway?.stop();
  await stack?.stop();
});

async function upload(size: number): Promise<number> {
  const started = performance.now();
  const res = await sendFile(baseUrl, p.token, p.elder, generatedText(size));
  if (res.status !== 202) throw new Error(`upload failed: ${res.status} ${res.text}`);
  return performance.now() - started;
}

it("upload throughput, 1 MB files (sequential and 4 at a time)", async () => {
  await upload(MB); // warm-up
  const count = 16;
  let started = performance.now();
  const latencies: number[] = [];
  for (let i = 0; i < count; i++) latencies.push(await upload(MB));
  const sequentialSeconds = (performance.now() - started) / 1000;
  started = performance.now();
  await Promise.all(Array.from({ length: 4 }, async () => {
    for (let i = 0; i < count / 4; i++) await upload(MB);
  }));
  const concurrentSeconds = (performance.now() - started) / 1000;
  report("files: 1 MB uploads through the gateway", {
    uploads: count,
    sequential_mb_per_s: count / sequentialSeconds,
    sequential_median_ms: [...latencies].sort((a, b) => a - b)[Math.floor(count / 2)]!,
    concurrent4_mb_per_s: count / concurrentSeconds,
  });
}, 120_000);

it("upload throughput, 25 MB files (sequential)", async () => {
  const count = 3;
  const times: number[] = [];
  for (let i = 0; i < count; i++) times.push(await upload(25 * MB));
  const seconds = times.reduce((a, b) => a + b, 0) / 1000;
  report("files: 25 MB uploads through the gateway", {
    uploads: count,
    mb_per_s: (count * 25) / seconds,
    best_mb_per_s: 25 / (Math.min(...times) / 1000),
    median_s: [...times].sort((a, b) => a - b)[1]! / 1000,
  });
}, 180_000);

it("gateway memory during 8 concurrent 25 MB uploads", async () => {
  const pid = gateway.pid!;
  const before = memoryOf(pid);
  let peak = before.rss;
  const sampler = setInterval(() => {
    peak = Math.max(peak, memoryOf(pid).rss);
  }, 20);
  const started = performance.now();
  try {
    await Promise.all(Array.from({ length: 8 }, () => upload(25 * MB)));
  } finally {
    clearInterval(sampler);
  }
  const seconds = (performance.now() - started) / 1000;
  const after = memoryOf(pid);
  report("files: gateway memory, 8 concurrent 25 MB uploads", {
    gateway_rss_before_mib: before.rss,
    gateway_rss_peak_mib: Math.max(peak, after.rss),
    gateway_rss_peak_growth_mib: Math.max(peak, after.rss) - before.rss,
    gateway_rss_lifetime_peak_mib: after.peak,
    aggregate_mb_per_s: (8 * 25) / seconds,
  });
}, 240_000);
