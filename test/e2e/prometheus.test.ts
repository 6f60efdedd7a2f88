import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLocalStack, type LocalStack } from "../../bench/support/local-stack.js";
import { call, accessToken, opsFor } from "../support/partner-api.js";
import { sendFile, waitForStatus } from "../support/files.js";
import { startTestReceiver, type TestReceiver } from "../support/webhook-receiver.js";

// A stock Prometheus (Debian's `prometheus` package) against `npm start`, as an operator scrapes the
// local stack (docs/observability.md): it finds every process through the stack's file-based
// discovery file ($STATE_DIR/prometheus/targets.json), every target is up, and a partner's journey
// (token, connection, a caregiver's approve and its webhook, an upload and its extraction) moves
// the counters and histograms an SRE's alerts and dashboard read. Waits poll the query.

const PROMETHEUS = "prometheus";
let stack: LocalStack;
let prometheus: ChildProcess | undefined;
let prometheusUrl: string;
let receiver: TestReceiver;
const dataDir = mkdtempSync(join(tmpdir(), "pi-prometheus-"));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

type Sample = { metric: Record<string, string>; value: [number, string] };

async function query(promql: string): Promise<Sample[]> {
  const res = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(promql)}`);
  const body = (await res.json()) as { status: string; error?: string; data?: { result: Sample[] } };
  if (body.status !== "success") throw new Error(`${promql}: ${body.error}`);
  return body.data!.result;
}

/** Polls `promql` until `holds` is true of its result (Prometheus scrapes every second). */
async function eventually(promql: string, holds: (result: Sample[]) => boolean, timeoutMs = 90_000): Promise<Sample[]> {
  const deadline = Date.now() + timeoutMs;
  let last: Sample[] = [];
  for (;;) {
    try {
      last = await query(promql);
      if (holds(last)) return last;
    } catch (err) {
      if (Date.now() > deadline) throw err;
    }
    if (Date.now() > deadline) throw new Error(`${promql} did not hold within ${timeoutMs} ms; last result: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const value = (result: Sample[]) => Number(result[0]?.value[1] ?? NaN);
const positive = (result: Sample[]) => result.length > 0 && value(result) > 0;

beforeAll(async () => {
  // Installed by .ci/run (`apt-get install prometheus`); without it this test fails, never skips.
  if (spawnSync("sh", ["-c", `command -v ${PROMETHEUS}`]).status !== 0) throw new Error("the prometheus binary is missing: apt-get install -y prometheus");
  receiver = await startTestReceiver("");
  stack = await startLocalStack({ portBase: 46000, env: { WEBHOOK_RETRY_BASE_SECONDS: "0.5", LOG_LEVEL: "warn" } });
  const port = await freePort();
  prometheusUrl = `http://127.0.0.1:${port}`;
  const config = join(dataDir, "prometheus.yml");
  writeFileSync(
    config,
    [
      "global:",
      "  scrape_interval: 1s",
      "  scrape_timeout: 1s",
      "  evaluation_interval: 1s",
      "scrape_configs:",
      "  - job_name: partner-integration",
      "    file_sd_configs:",
      `      - files: ["${join(stack.stateDir, "prometheus", "targets.json")}"]`,
      "        refresh_interval: 1s",
      "",
    ].join("\n"),
  );
  const log = openSync(join(dataDir, "prometheus.log"), "a");
  prometheus = spawn(PROMETHEUS, [`--config.file=${config}`, `--storage.tsdb.path=${join(dataDir, "data")}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: ["ignore", log, log] });
  prometheus.once("exit", (code) => {
    if (code !== null && code !== 0) process.stderr.write(`prometheus exited ${code}:\n${readFileSync(join(dataDir, "prometheus.log"), "utf8").slice(-2000)}\n`);
  });
}, 400_000);

afterAll(async () => {
  prometheus?.kill("SIGTERM");
  await receiver?.close();
  await stack?.stop();
  rmSync(dataDir, { recursive: true, force: true });
}, 90_000);

describe("Prometheus against npm start", () => {
  it("finds every process through $STATE_DIR/prometheus/targets.json and scrapes them all (up == 1), the gateway and services on ports of their own", async () => {
    const targets = JSON.parse(readFileSync(join(stack.stateDir, "prometheus", "targets.json"), "utf8")) as { targets: string[]; labels: Record<string, string> }[];
    // Two replicas of each of the six processes npm start runs.
    expect(targets.map((t) => `${t.labels.service}-${t.labels.replica}`).sort()).toEqual(
      ["auth", "connection", "extraction", "file-intake", "gateway", "webhook"].flatMap((s) => [`${s}-1`, `${s}-2`]).sort(),
    );
    const ports = targets.map((t) => t.targets[0]!.split(":")[1]);
    expect(new Set(ports).size).toBe(targets.length);
    expect(ports).not.toContain(new URL(stack.baseUrl).port);
    const up = await eventually("up", (r) => r.length === targets.length && r.every((s) => s.value[1] === "1"));
    expect(up.map((s) => s.metric.service).sort()).toEqual(targets.map((t) => t.labels.service).sort());
    // The partner port serves no metrics.
    expect((await fetch(`${stack.baseUrl}/metrics`)).status).toBe(404);
    // Runtime metrics of every process: event-loop delay, heap, GC.
    for (const name of ["nodejs_eventloop_lag_seconds", "nodejs_heap_size_used_bytes", "nodejs_gc_duration_seconds_count"]) {
      await eventually(`count(${name})`, (r) => value(r) >= targets.length);
    }
  }, 300_000);

  it("a partner's journey moves the request, call, messaging and journey metrics", async () => {
    const ops = opsFor(stack.settings);
    const partner = await ops.partnerCreate({ name: "Metrics Pharmacy", webhookUrl: receiver.url });
    receiver.useSecret(partner.signing_secret);
    const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const elder = await ops.elderCreate();
    const con = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
    expect(con.status).toBe(202);
    await ops.connectionAct("approve", con.json!.id as string);
    await receiver.waitFor((arrivals) => arrivals.some((a) => a.event.type === "connection.approved"), 60_000, "the approved webhook");
    const upload = await sendFile(stack.baseUrl, token, elder.address, Buffer.from("Metformin 500 mg twice a day.\n"), { filename: "note.txt" });
    expect(upload.status).toBe(202);
    await waitForStatus(stack.baseUrl, token, upload.json!.id as string, ["processed"]);
    // A refused upload: no file part.
    expect((await call(stack.baseUrl, token, "POST", "/v1/files", {})).status).toBeGreaterThanOrEqual(400);

    // Requests by route template, never a raw path.
    await eventually('sum(http_server_request_duration_seconds_count{http_route="/oauth/token",http_request_method="POST",http_response_status_code="200"})', positive);
    await eventually('sum(http_server_request_duration_seconds_count{http_route="/v1/files/{id}",http_request_method="GET"})', positive);
    expect(await query('count(http_server_request_duration_seconds_count{http_route=~".*(con|file)_.*"})')).toEqual([]);
    // Internal calls on both sides.
    await eventually('sum(rpc_server_call_duration_seconds_count{service="auth",rpc_method="IssueTokens",rpc_grpc_status_code="0"})', positive);
    await eventually('sum(rpc_client_call_duration_seconds_count{service="gateway",rpc_method="SubmitFile"})', positive);
    // Kafka: the connection event published and consumed, the file event consumed by extraction.
    await eventually('sum(messaging_client_sent_messages_total{service="connection"})', positive);
    await eventually('sum(messaging_client_consumed_messages_total{service="webhook"})', positive);
    await eventually('sum(messaging_process_duration_seconds_count{service="extraction"})', positive);
    // The journey's own.
    await eventually("sum(pi_tokens_issued_total)", positive);
    await eventually('sum(pi_connection_transitions_total{to="approved"})', positive);
    await eventually('sum(pi_webhook_deliveries_total{outcome="delivered"})', positive);
    await eventually("sum(pi_webhook_attempt_duration_seconds_count)", positive);
    await eventually("sum(pi_files_accepted_total)", positive);
    await eventually("sum(pi_files_refused_total)", positive);
    await eventually('sum(pi_extractions_total{outcome="processed"})', positive);
    await eventually('sum(pi_extraction_duration_seconds_count{outcome="processed"})', positive);
    // Gauges every replica computes on its loop.
    for (const gauge of ["pi_extraction_backlog", "pi_webhook_oldest_pending_delivery_age_seconds", "pi_webhook_failing_endpoints", "pi_storage_quota_max_used_ratio", "pi_storage_partners_over_quota_ratio", "pi_outbox_oldest_unrelayed_age_seconds", "pi_kafka_consumer_lag"]) {
      await eventually(`count(${gauge})`, (r) => value(r) > 0);
    }
    await eventually('max(pi_storage_quota_max_used_ratio{mode="live"})', positive);
  }, 400_000);

  it("a replica killed outright is restarted on a new metrics port, and the discovery file and Prometheus follow it", async () => {
    const file = join(stack.stateDir, "prometheus", "targets.json");
    type Group = { targets: string[]; labels: Record<string, string> };
    const portOf = () => (JSON.parse(readFileSync(file, "utf8")) as Group[]).find((g) => g.labels.service === "webhook" && g.labels.replica === "2")?.targets[0]?.split(":")[1];
    const before = portOf()!;
    // The process that serves that port: its METRICS_PORT, as npm start gave it.
    const victim = stack.processes().find((p) => {
      try {
        return readFileSync(`/proc/${p.pid}/environ`, "utf8").split("\0").includes(`METRICS_PORT=${before}`);
      } catch {
        return false;
      }
    });
    expect(victim?.name).toBe("webhook");
    process.kill(victim!.pid, "SIGKILL");
    const deadline = Date.now() + 60_000;
    while (portOf() === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    const after = portOf();
    expect(after).toBeDefined();
    expect(after).not.toBe(before);
    await eventually(`up{service="webhook",replica="2",instance="127.0.0.1:${after}"}`, (r) => r.length === 1 && r[0]!.value[1] === "1");
    // The old address is no longer among Prometheus's targets.
    const active = ((await (await fetch(`${prometheusUrl}/api/v1/targets?state=active`)).json()) as { data: { activeTargets: { scrapeUrl: string }[] } }).data.activeTargets;
    expect(active.map((t) => t.scrapeUrl)).toContain(`http://127.0.0.1:${after}/metrics`);
    expect(active.map((t) => t.scrapeUrl)).not.toContain(`http://127.0.0.1:${before}/metrics`);
  }, 240_000);
});
