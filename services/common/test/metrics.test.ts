import { describe, expect, it } from "@jest/globals";
import { RpcError, Status } from "../src/rpc/errors.js";
import { closeClient, serviceClient } from "../src/rpc/client.js";
import { serveForTest, testIdentityKey } from "../../../test/support/local-client.js";
import { authv1 } from "@pi/proto";
import { consumerLag } from "../src/background/consume.js";
import { createLogger } from "../src/runtime/logger.js";
import {
  extractionBacklog,
  metricsRegistry,
  readAtScrape,
  rpcClientDuration,
  rpcServerDuration,
  SCRAPE_READ_MS,
  startMetricsServer,
  storageQuotaMaxUsedRatio,
} from "../src/runtime/metrics.js";

// The metrics every process serves (docs/observability.md, "Metrics"): its own port, the Prometheus
// text format, internal calls by service, method and gRPC status on both sides, and the consumer lag rule.

describe("the metrics endpoint", () => {
  it("serves GET /metrics in the Prometheus text format on a port of its own, the runtime's metrics included, and nothing else", async () => {
    const server = (await startMetricsServer({
      enabled: true,
      host: "127.0.0.1",
      port: 0,
      logger: createLogger("metrics-test", "silent"),
    }))!;
    try {
      const res = await fetch(`http://127.0.0.1:${server.port}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toContain("text/plain");
      const text = await res.text();
      for (const name of [
        "nodejs_eventloop_lag_seconds",
        "nodejs_heap_size_used_bytes",
        "nodejs_gc_duration_seconds",
        "process_cpu_seconds_total",
        "http_server_request_duration_seconds",
        "pi_webhook_deliveries_total",
      ]) {
        expect(text).toContain(`# TYPE ${name} `);
      }
      expect((await fetch(`http://127.0.0.1:${server.port}/`)).status).toBe(404);
      expect((await fetch(`http://127.0.0.1:${server.port}/metrics`, { method: "POST" })).status).toBe(404);
    } finally {
      await server.stop();
    }
  });

  it("METRICS_ENABLED=false serves nothing", async () => {
    expect(
      await startMetricsServer({
        enabled: false,
        host: "127.0.0.1",
        port: 0,
        logger: createLogger("metrics-test", "silent"),
      }),
    ).toBeUndefined();
    // Recording back on for the other tests of this process.
    const server = (await startMetricsServer({
      enabled: true,
      host: "127.0.0.1",
      port: 0,
      logger: createLogger("metrics-test", "silent"),
    }))!;
    await server.stop();
  });
});

describe("gauges read at scrape (prom-client collect, readAtScrape)", () => {
  const logger = createLogger("metrics-test", "silent");
  const scrape = async (port: number) => {
    const res = await fetch(`http://127.0.0.1:${port}/metrics`);
    return { status: res.status, backlog: Number(/^pi_extraction_backlog (\S+)$/m.exec(await res.text())?.[1]) };
  };

  it("is read when /metrics is scraped, once per scrape for all the gauges it sets, and never after its stop", async () => {
    let reads = 0;
    const reading = readAtScrape(
      [extractionBacklog, storageQuotaMaxUsedRatio],
      async () => extractionBacklog.set(++reads * 10),
      logger,
    );
    const server = (await startMetricsServer({ enabled: true, host: "127.0.0.1", port: 0, logger }))!;
    try {
      expect(reads).toBe(0);
      expect(await scrape(server.port)).toEqual({ status: 200, backlog: 10 });
      expect(await scrape(server.port)).toEqual({ status: 200, backlog: 20 });
      await reading.stop();
      expect(await scrape(server.port)).toEqual({ status: 200, backlog: 20 });
      expect(reads).toBe(2);
    } finally {
      await server.stop();
    }
  });

  it("a read slower than SCRAPE_READ_MS: the scrape answers with the last value, and the scrapes that follow share that read instead of starting more", async () => {
    extractionBacklog.set(7);
    let reads = 0;
    let release: () => void = () => undefined;
    const reading = readAtScrape(
      [extractionBacklog],
      () => {
        reads++;
        if (reads > 1) return Promise.resolve(extractionBacklog.set(9));
        return new Promise<void>((resolve) => {
          release = () => {
            extractionBacklog.set(8);
            resolve();
          };
        });
      },
      logger,
    );
    const server = (await startMetricsServer({ enabled: true, host: "127.0.0.1", port: 0, logger }))!;
    try {
      const started = performance.now();
      expect(await scrape(server.port)).toEqual({ status: 200, backlog: 7 });
      expect(performance.now() - started).toBeGreaterThanOrEqual(SCRAPE_READ_MS - 50);
      const next = metricsRegistry.metrics();
      expect(reads).toBe(1);
      release();
      await next;
      expect(await scrape(server.port)).toEqual({ status: 200, backlog: 9 });
      expect(reads).toBe(2);
    } finally {
      await reading.stop();
      await server.stop();
    }
  });

  it("a failing read leaves the gauge at its last value and the scrape answers 200", async () => {
    extractionBacklog.set(3);
    const reading = readAtScrape([extractionBacklog], () => Promise.reject(new Error("database unreachable")), logger);
    const server = (await startMetricsServer({ enabled: true, host: "127.0.0.1", port: 0, logger }))!;
    try {
      expect(await scrape(server.port)).toEqual({ status: 200, backlog: 3 });
    } finally {
      await reading.stop();
      await server.stop();
    }
  });
});

describe("rpc_server_call_duration_seconds and rpc_client_call_duration_seconds", () => {
  it("count each call on both sides by service, method and gRPC status code", async () => {
    const server = await serveForTest("auth", (router) =>
      router.service(authv1.AuthService, {
        issueToken: (req) => {
          if (req.clientId === "missing") throw new RpcError("no such client", Status.NOT_FOUND);
          return {};
        },
      }),
    );
    const auth = serviceClient(authv1.AuthService, `http://127.0.0.1:${server.port}`, testIdentityKey("gateway"));
    await auth.issueToken({ clientId: "" });
    await expect(auth.issueToken({ clientId: "missing" })).rejects.toThrow();
    for (const histogram of [rpcServerDuration, rpcClientDuration]) {
      const counts = (await histogram.get()).values.filter(
        (v) => v.metricName?.endsWith("_count") && v.labels.rpc_method === "IssueToken",
      );
      expect(counts.map((v) => [v.labels.rpc_grpc_status_code, v.value]).sort()).toEqual([
        ["0", 1],
        [String(Status.NOT_FOUND), 1],
      ]);
      expect(counts[0]!.labels.rpc_service).toBe(authv1.AuthService.typeName);
    }
    closeClient(auth);
    await server.close();
    expect(await metricsRegistry.metrics()).toMatch(
      /^rpc_server_call_duration_seconds_bucket\{.*rpc_service="pi\.auth\.v1\.AuthService".*\} 1$/m,
    );
  });
});

describe("pi_kafka_consumer_lag", () => {
  it("sums, per partition, the end offset less the group's committed offset; a partition the group never committed counts from its start", () => {
    const ends = [
      { partition: 0, high: "10", low: "0" },
      { partition: 1, high: "7", low: "2" },
      { partition: 2, high: "5", low: "0" },
    ];
    expect(
      consumerLag(ends, [
        { partition: 0, offset: "4" },
        { partition: 1, offset: "-1" },
        { partition: 2, offset: "5" },
      ]),
    ).toBe(6 + 5 + 0);
    expect(consumerLag(ends, [])).toBe(10 + 5 + 5);
  });
});
