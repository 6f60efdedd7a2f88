import { afterAll, beforeAll, describe, it } from "@jest/globals";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { NO_RATE_LIMITS } from "../test/support/auth.js";
import { connectedPartner, sendFile, type ConnectedPartner } from "../test/support/files.js";
import { textPdf } from "../test/support/pdf.js";
import { knobs, MiB } from "./support/knobs.js";
import { startLocalStack, type LocalStack } from "./support/local-stack.js";
import { median } from "./report.js";

// One 1 MB PDF upload, hop by hop: the stack as `npm start` runs it, every service exporting its
// spans (OTLP over HTTP/JSON) to a collector in this process. Uploads go one at a time; the trace
// printed is the one of median duration, each span with its start and duration relative to the
// gateway's. A stack of its own, so not part of a full run: `BENCH_TRACE=1 npm run bench -- bench/upload-trace.bench.ts`.

interface Span {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  start: number;
  end: number;
}

const spans: Span[] = [];
let collector: http.Server;
let stack: LocalStack;
let partner: ConnectedPartner;

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
}
interface Otlp {
  resourceSpans: {
    resource: { attributes: { key: string; value: { stringValue?: string } }[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

(process.env.BENCH_TRACE === "1" ? describe : describe.skip)("upload trace", () => {
  beforeAll(async () => {
    collector = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Otlp;
        for (const rs of body.resourceSpans) {
          const service = rs.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue ?? "?";
          for (const ss of rs.scopeSpans)
            for (const s of ss.spans)
              spans.push({
                service,
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId || undefined,
                name: s.name,
                start: Number(BigInt(s.startTimeUnixNano) / 1000n) / 1000,
                end: Number(BigInt(s.endTimeUnixNano) / 1000n) / 1000,
              });
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      });
    });
    await new Promise<void>((r) => collector.listen(0, "127.0.0.1", r));
    const port = (collector.address() as AddressInfo).port;
    stack = await startLocalStack({
      portBase: knobs.portBase,
      env: {
        ...NO_RATE_LIMITS,
        ACCESS_TOKEN_TTL_SECONDS: "3600",
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_BSP_SCHEDULE_DELAY: "200",
      },
    });
    partner = await connectedPartner(stack, "Trace Partner");
  }, 600_000);

  afterAll(async () => {
    await stack?.stop();
    collector?.close();
  }, 90_000);

  it("one 1 MB PDF upload, hop by hop", async () => {
    const pdf = textPdf(MiB);
    const timed: { ms: number; id: string }[] = [];
    for (let i = 0; i < 20; i++) {
      const started = performance.now();
      const res = await sendFile(stack.baseUrl, partner.token, partner.elder, pdf, { filename: "report.pdf" });
      if (res.status !== 202) throw new Error(`upload refused: ${res.status} ${res.text}`);
      if (i >= 5) timed.push({ ms: performance.now() - started, id: res.json!.id as string });
    }
    await new Promise((r) => setTimeout(r, 3000)); // the exporters' last batches
    const roots = spans.filter((s) => s.name === "POST /v1/files" && !s.parentSpanId).sort((a, b) => a.start - b.start);
    const last = roots.slice(-timed.length);
    const ms = last.map((s) => s.end - s.start);
    const mid = last[ms.indexOf(median(ms))] ?? last[Math.floor(last.length / 2)]!;
    const lines: string[] = [];
    const walk = (s: Span, depth: number) => {
      lines.push(
        `${(s.start - mid.start).toFixed(1).padStart(7)} +${(s.end - s.start).toFixed(1).padStart(6)} ms  ${"  ".repeat(depth)}${s.service}: ${s.name}`,
      );
      for (const c of spans.filter((x) => x.parentSpanId === s.spanId).sort((a, b) => a.start - b.start))
        walk(c, depth + 1);
    };
    walk(mid, 0);
    process.stdout.write(
      `client p50 of ${timed.length}: ${median(timed.map((t) => t.ms)).toFixed(1)} ms; gateway span p50 ${median(ms).toFixed(1)} ms\n` +
        `start    duration  span (the median upload)\n${lines.join("\n")}\n`,
    );
  }, 300_000);
});
