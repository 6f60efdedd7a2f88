import { createServer, type Server } from "node:http";
import client from "prom-client";
import { atMost } from "./at-most.js";
import type { Logger } from "./logger.js";

// Prometheus metrics of every process (docs/observability.md, "Metrics"): one registry, served on
// METRICS_PORT (never the partner port). prom-client, not OpenTelemetry's exporter: half the cost
// per value, and it keeps the names exactly. The names are the operator contract's: add, never
// rename. Labels come from small closed sets only: never an address, an id or anything a partner sent.

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

// --- semantic conventions (http.server.request.duration, rpc.*.call.duration, messaging.*) ---
export const httpServerDuration = new client.Histogram({
  name: "http_server_request_duration_seconds",
  help: "Duration of partner requests at the gateway, by route template",
  labelNames: ["http_request_method", "http_route", "http_response_status_code"] as const,
  buckets: DURATION_BUCKETS,
  registers,
});
const rpcLabels = ["rpc_service", "rpc_method", "rpc_grpc_status_code"] as const;
export const rpcServerDuration = new client.Histogram({
  name: "rpc_server_call_duration_seconds",
  help: "Duration of served internal calls",
  labelNames: rpcLabels,
  buckets: DURATION_BUCKETS,
  registers,
});
export const rpcClientDuration = new client.Histogram({
  name: "rpc_client_call_duration_seconds",
  help: "Duration of internal calls made",
  labelNames: rpcLabels,
  buckets: DURATION_BUCKETS,
  registers,
});
export const messagesSent = new client.Counter({
  name: "messaging_client_sent_messages_total",
  help: "Kafka messages published",
  labelNames: ["messaging_destination_name"] as const,
  registers,
});
export const messagesConsumed = new client.Counter({
  name: "messaging_client_consumed_messages_total",
  help: "Kafka messages consumed",
  labelNames: ["messaging_destination_name"] as const,
  registers,
});
export const messageProcessDuration = new client.Histogram({
  name: "messaging_process_duration_seconds",
  help: "Time a consumer took over one message (over a batch, divided among its messages)",
  labelNames: ["messaging_destination_name"] as const,
  buckets: DURATION_BUCKETS,
  registers,
});

// --- the system's own ---
export const webhookDeliveries = new client.Counter({
  name: "pi_webhook_deliveries_total",
  help: "Webhook delivery attempts by outcome: delivered, retry (will be tried again), failed (given up)",
  labelNames: ["outcome"] as const,
  registers,
});
export const webhookAttemptDuration = new client.Histogram({
  name: "pi_webhook_attempt_duration_seconds",
  help: "Duration of one webhook delivery attempt",
  buckets: LONG_BUCKETS,
  registers,
});
export const webhookOldestPendingAge = gaugeReadAtScrape({
  name: "pi_webhook_oldest_pending_delivery_age_seconds",
  help: "Age of the oldest webhook delivery not yet delivered nor given up (0: none)",
});
export const webhookFailingEndpoints = gaugeReadAtScrape({
  name: "pi_webhook_failing_endpoints",
  help: "Partner webhook endpoints failing: every attempt failed for the failing period",
});

export const filesAccepted = new client.Counter({
  name: "pi_files_accepted_total",
  help: "Uploads accepted",
  registers,
});
export const filesRefused = new client.Counter({
  name: "pi_files_refused_total",
  help: "Uploads refused, by the error code answered",
  labelNames: ["code"] as const,
  registers,
});
export const extractionBacklog = gaugeReadAtScrape({
  name: "pi_extraction_backlog",
  help: "Files accepted and not yet processed or failed (store-wide)",
});
export const extractionDuration = new client.Histogram({
  name: "pi_extraction_duration_seconds",
  help: "Duration of one file's extraction, by outcome",
  labelNames: ["outcome"] as const,
  buckets: LONG_BUCKETS,
  registers,
});
export const extractions = new client.Counter({
  name: "pi_extractions_total",
  help: "Extractions finished, by outcome (processed, failed)",
  labelNames: ["outcome"] as const,
  registers,
});

export const connectionTransitions = new client.Counter({
  name: "pi_connection_transitions_total",
  help: "Connection state changes",
  labelNames: ["from", "to"] as const,
  registers,
});

export const tokensIssued = new client.Counter({
  name: "pi_tokens_issued_total",
  help: "Access tokens issued",
  registers,
});
export const tokensRefused = new client.Counter({
  name: "pi_tokens_refused_total",
  help: "Token requests refused (no reason given, as to the client)",
  registers,
});

export const outboxOldestUnrelayedAge = gaugeReadAtScrape({
  name: "pi_outbox_oldest_unrelayed_age_seconds",
  help: "Age of the oldest outbox entry not yet published to Kafka (0: none)",
  labelNames: ["outbox"] as const,
});
export const storageQuotaMaxUsedRatio = gaugeReadAtScrape({
  name: "pi_storage_quota_max_used_ratio",
  help: "The highest used / quota ratio over partners, per mode",
  labelNames: ["mode"] as const,
});
export const storagePartnersOverQuotaRatio = gaugeReadAtScrape({
  name: "pi_storage_partners_over_quota_ratio",
  help: "Partners whose used / quota ratio, in either mode, is at or above the threshold",
  labelNames: ["threshold"] as const,
});
export const kafkaConsumerLag = gaugeReadAtScrape({
  name: "pi_kafka_consumer_lag",
  help: "Messages not yet consumed by the group, summed over its partitions",
  labelNames: ["group"] as const,
});

/**
 * The event-loop delay histogram's sampling period: its timer wakes the process, idle or not (at
 * 20 ms, a fifth of the idle stack's CPU); a stall of 100 ms or more is still recorded in full.
 */
const EVENT_LOOP_SAMPLE_MS = 100;

/** How long a scrape waits for each gauge read from the database or Kafka; past it the gauge keeps its last value. */
export const SCRAPE_READ_MS = 2_000;

interface ScrapeRead {
  read(): Promise<unknown>;
  logger: Logger;
  /** The read under way: a later scrape (or another gauge it sets) shares it rather than start another. */
  inFlight?: Promise<unknown>;
}
const scrapeReads = new Map<client.Gauge, Set<ScrapeRead>>();

async function runRead(gauge: string, entry: ScrapeRead): Promise<void> {
  entry.inFlight ??= Promise.resolve()
    .then(entry.read)
    .catch((err: unknown) => entry.logger.warn({ err, gauge }, "gauge not read; it keeps its last value"))
    .finally(() => (entry.inFlight = undefined));
  if (!(await atMost(entry.inFlight, SCRAPE_READ_MS)))
    entry.logger.warn({ gauge, waitedMs: SCRAPE_READ_MS }, "gauge not read in time; it keeps its last value");
}

/** A gauge set, when Prometheus scrapes (prom-client's async collect), by the reads registered with readAtScrape. */
function gaugeReadAtScrape<T extends string>(config: client.GaugeConfiguration<T>): client.Gauge<T> {
  return new client.Gauge<T>({
    ...config,
    registers,
    async collect() {
      await Promise.all([...(scrapeReads.get(this) ?? [])].map((entry) => runRead(config.name, entry)));
    },
  });
}

/**
 * Registers `read`, which sets `gauges` from the database or Kafka, to run when Prometheus scrapes:
 * a process nobody scrapes reads nothing. `stop` unregisters it and waits for its read under way
 * (SCRAPE_READ_MS at most).
 */
export function readAtScrape(
  gauges: client.Gauge[],
  read: () => Promise<unknown>,
  logger: Logger,
): { stop(): Promise<void> } {
  const entry: ScrapeRead = { read, logger };
  for (const gauge of gauges) scrapeReads.set(gauge, (scrapeReads.get(gauge) ?? new Set()).add(entry));
  return {
    async stop() {
      for (const gauge of gauges) scrapeReads.get(gauge)?.delete(entry);
      if (entry.inFlight !== undefined) await atMost(entry.inFlight, SCRAPE_READ_MS);
    },
  };
}

/** Seconds since `start` (a performance.now() reading). */
export const secondsSince = (start: number): number => (performance.now() - start) / 1000;

export interface MetricsServer {
  port: number;
  stop(): Promise<void>;
}

/**
 * Serves the registry at `GET /metrics` on its own port (METRICS_PORT; 0 takes a free one) and
 * collects the runtime's metrics (event-loop delay, heap, GC: prom-client's standard `nodejs_*` and
 * `process_*`). `enabled` false (METRICS_ENABLED=false): nothing served, nothing recorded on the
 * request path.
 */
export async function startMetricsServer(opts: {
  enabled: boolean;
  host: string;
  port: number;
  logger: Logger;
}): Promise<MetricsServer | undefined> {
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
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const port = (server.address() as { port: number }).port;
  return {
    port,
    stop: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
