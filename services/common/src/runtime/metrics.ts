import { once } from "node:events";
import { createServer, type Server } from "node:http";
import client from "prom-client";
import { atMost } from "../rules/at-most.js";
import type { Logger } from "./logger.js";

// Prometheus metrics of every process (docs/observability.md, "Metrics"). The names are the operator
// contract's: add, never rename. Labels come from small closed sets only, never from what a partner sent.

export const metricsRegistry = new client.Registry();
let collectingDefaults = false;
let recording = true;

/** Whether request-path metrics are recorded (METRICS_ENABLED; off only to measure what they cost). */
export const metricsRecording = (): boolean => recording;

const registers = [metricsRegistry];

// The stable OpenTelemetry semantic conventions' buckets for request durations, in seconds.
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
// Work that may take minutes (an extraction, a webhook attempt with its timeout).
const LONG_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

const counter = <T extends string>(name: string, help: string, labelNames: readonly T[] = []) =>
  new client.Counter<T>({ name, help, labelNames, registers });
const histogram = <T extends string>(name: string, help: string, buckets: number[], labelNames: readonly T[] = []) =>
  new client.Histogram<T>({ name, help, buckets, labelNames, registers });

export const httpServerDuration = histogram(
  "http_server_request_duration_seconds",
  "Duration of partner requests at the gateway, by route template",
  DURATION_BUCKETS,
  ["http_request_method", "http_route", "http_response_status_code"],
);
const rpcLabels = ["rpc_service", "rpc_method", "rpc_grpc_status_code"] as const;
export const rpcServerDuration = histogram(
  "rpc_server_call_duration_seconds",
  "Duration of served internal calls",
  DURATION_BUCKETS,
  rpcLabels,
);
export const rpcClientDuration = histogram(
  "rpc_client_call_duration_seconds",
  "Duration of internal calls made",
  DURATION_BUCKETS,
  rpcLabels,
);
const topic = ["messaging_destination_name"] as const;
export const messagesSent = counter("messaging_client_sent_messages_total", "Kafka messages published", topic);
export const messagesConsumed = counter("messaging_client_consumed_messages_total", "Kafka messages consumed", topic);
export const messageProcessDuration = histogram(
  "messaging_process_duration_seconds",
  "Time a consumer took over one message (over a batch, divided among its messages)",
  DURATION_BUCKETS,
  topic,
);

export const webhookDeliveries = counter(
  "pi_webhook_deliveries_total",
  "Webhook delivery attempts by outcome: delivered, retry (will be tried again), failed (given up)",
  ["outcome"],
);
export const webhookAttemptDuration = histogram(
  "pi_webhook_attempt_duration_seconds",
  "Duration of one webhook delivery attempt",
  LONG_BUCKETS,
);
export const webhookOldestPendingAge = gaugeReadAtScrape(
  "pi_webhook_oldest_pending_delivery_age_seconds",
  "Age of the oldest webhook delivery not yet delivered nor given up (0: none)",
);
export const webhookFailingEndpoints = gaugeReadAtScrape(
  "pi_webhook_failing_endpoints",
  "Partner webhook endpoints failing: every attempt failed for the failing period",
);

export const filesAccepted = counter("pi_files_accepted_total", "Uploads accepted");
export const filesRefused = counter("pi_files_refused_total", "Uploads refused, by the error code answered", ["code"]);
export const extractionBacklog = gaugeReadAtScrape(
  "pi_extraction_backlog",
  "Files accepted and not yet processed or failed (store-wide)",
);
export const extractionDuration = histogram(
  "pi_extraction_duration_seconds",
  "Duration of one file's extraction, by outcome",
  LONG_BUCKETS,
  ["outcome"],
);
export const extractions = counter("pi_extractions_total", "Extractions finished, by outcome (processed, failed)", [
  "outcome",
]);

export const connectionTransitions = counter("pi_connection_transitions_total", "Connection state changes", [
  "from",
  "to",
]);

export const tokensIssued = counter("pi_tokens_issued_total", "Access tokens issued");
export const tokensRefused = counter(
  "pi_tokens_refused_total",
  "Token requests refused (no reason given, as to the client)",
);

export const outboxOldestUnrelayedAge = gaugeReadAtScrape(
  "pi_outbox_oldest_unrelayed_age_seconds",
  "Age of the oldest outbox entry not yet published to Kafka (0: none)",
  ["outbox"],
);
export const storageQuotaMaxUsedRatio = gaugeReadAtScrape(
  "pi_storage_quota_max_used_ratio",
  "The highest used / quota ratio over partners, per mode",
  ["mode"],
);
export const storagePartnersOverQuotaRatio = gaugeReadAtScrape(
  "pi_storage_partners_over_quota_ratio",
  "Partners whose used / quota ratio, in either mode, is at or above the threshold",
  ["threshold"],
);
export const kafkaConsumerLag = gaugeReadAtScrape(
  "pi_kafka_consumer_lag",
  "Messages not yet consumed by the group, summed over its partitions",
  ["group"],
);

/** The event-loop delay's sampling period: at 20 ms its timer cost a fifth of the idle stack's CPU. */
const EVENT_LOOP_SAMPLE_MS = 100;

/** How long a scrape waits for each gauge read from the database or Kafka; past it the gauge keeps its last value. */
export const SCRAPE_READ_MS = 2_000;

/** The reads of each gauge set at scrape, each given the gauge's name for its log lines. */
const scrapeReads = new Map<client.Gauge, Set<(gauge: string) => Promise<void>>>();

function gaugeReadAtScrape<T extends string>(name: string, help: string, labelNames: readonly T[] = []) {
  return new client.Gauge<T>({
    name,
    help,
    labelNames,
    registers,
    async collect() {
      await Promise.all([...(scrapeReads.get(this) ?? [])].map((run) => run(name)));
    },
  });
}

/** Registers `read`, which sets `gauges`, to run when Prometheus scrapes: nobody scraping, nothing read. */
export function readAtScrape(
  gauges: client.Gauge[],
  read: () => Promise<unknown>,
  logger: Logger,
): { stop(): Promise<void> } {
  // The read under way: a later scrape (or another gauge it sets) shares it rather than start another.
  let inFlight: Promise<unknown> | undefined;
  const run = async (gauge: string) => {
    inFlight ??= Promise.resolve()
      .then(read)
      .catch((err: unknown) => logger.warn({ err, gauge }, "gauge not read; it keeps its last value"))
      .finally(() => (inFlight = undefined));
    if (!(await atMost(inFlight, SCRAPE_READ_MS)))
      logger.warn({ gauge, waitedMs: SCRAPE_READ_MS }, "gauge not read in time; it keeps its last value");
  };
  for (const gauge of gauges) scrapeReads.set(gauge, (scrapeReads.get(gauge) ?? new Set()).add(run));
  return {
    async stop() {
      for (const gauge of gauges) scrapeReads.get(gauge)?.delete(run);
      if (inFlight !== undefined) await atMost(inFlight, SCRAPE_READ_MS);
    },
  };
}

export const secondsSince = (start: number): number => (performance.now() - start) / 1000;

/** Serves `GET /metrics` on METRICS_PORT with prom-client's runtime metrics; disabled, nothing is recorded. */
export async function startMetricsServer(opts: { enabled: boolean; host: string; port: number; logger: Logger }) {
  recording = opts.enabled;
  if (!opts.enabled) return undefined;
  if (!collectingDefaults) {
    collectingDefaults = true;
    client.collectDefaultMetrics({ register: metricsRegistry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  }
  const server: Server = createServer((req, res) => {
    if (req.method !== "GET" || (req.url !== "/metrics" && !req.url?.startsWith("/metrics?"))) {
      res.writeHead(404).end();
      return;
    }
    metricsRegistry.metrics().then(
      (body) => res.writeHead(200, { "content-type": metricsRegistry.contentType }).end(body),
      (err: unknown) => {
        opts.logger.warn({ err }, "metrics not collected");
        res.writeHead(500).end();
      },
    );
  });
  server.listen(opts.port, opts.host);
  await once(server, "listening");
  return {
    port: (server.address() as { port: number }).port,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
