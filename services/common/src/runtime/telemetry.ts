import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Link,
  type Span,
  type TextMapGetter,
} from "@opentelemetry/api";
import type { DescMethod } from "@bufbuild/protobuf";
import { metricsRecording, rpcClientDuration, rpcServerDuration } from "./metrics.js";

// Tracing through the OpenTelemetry API: a no-op until an SDK is registered (OTEL_* variables, or a
// test's). Context crosses calls and Kafka messages as W3C trace headers.

export function telemetryRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED === "true") return false;
  const exporters = [env.OTEL_TRACES_EXPORTER].filter((e) => e && e !== "none");
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || exporters.length > 0);
}

/** Starts the OpenTelemetry Node SDK, for traces, when an exporter is configured; returns its shutdown. */
export async function startTelemetry(serviceName: string): Promise<() => Promise<void>> {
  if (!telemetryRequested()) return async () => {};
  // Metrics are served to Prometheus by metrics.ts; an SDK exporter of its own would take its port.
  process.env.OTEL_METRICS_EXPORTER = "none";
  const { NodeSDK } = await import("@opentelemetry/sdk-node");
  const sdk = new NodeSDK({ serviceName, instrumentations: [] });
  sdk.start();
  return () => sdk.shutdown();
}

export function traceHeaders(ctx = context.active()): Record<string, string> {
  const carrier = {};
  propagation.inject(ctx, carrier);
  return carrier;
}

const recordGetter: TextMapGetter<Record<string, unknown>> = {
  keys: (c) => Object.keys(c),
  get: (c, k) => {
    const v = c[k];
    return v === undefined || v === null ? undefined : Buffer.isBuffer(v) ? v.toString() : String(v);
  },
};

/** The context carried by stored or received headers (Kafka message headers, a stored outbox entry). */
export function contextFromHeaders(headers: Record<string, unknown> | undefined): Context {
  return headers ? propagation.extract(ROOT_CONTEXT, headers, recordGetter) : ROOT_CONTEXT;
}

/** Runs fn inside a new span; `links`: other traces its work belongs to as well (one call for several requests). */
export async function inSpan<T>(
  name: string,
  opts: { kind?: SpanKind; parent?: Context; links?: Context[]; attributes?: Record<string, string | number> },
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = opts.parent ?? context.active();
  const links = opts.links?.flatMap((c): Link[] => {
    const linked = trace.getSpanContext(c);
    return linked ? [{ context: linked }] : [];
  });
  const span = trace
    .getTracer("partner-integration")
    .startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes, links }, parent);
  try {
    return await context.with(trace.setSpan(parent, span), () => fn(span));
  } catch (err) {
    span.recordException(err as Error);
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw err;
  } finally {
    span.end();
  }
}

/**
 * An internal call's span and duration metric: a CLIENT span, whose context `fn` sends as headers, or a
 * SERVER span, child of the caller's context (the headers it received).
 */
async function rpcSpan<T>(kind: SpanKind, method: DescMethod, parent: Context | undefined, fn: () => Promise<T>) {
  const histogram = kind === SpanKind.SERVER ? rpcServerDuration : rpcClientDuration;
  const labels = { rpc_service: method.parent.typeName, rpc_method: method.name };
  const end = metricsRecording() ? histogram.startTimer(labels) : undefined;
  const name = `${method.parent.typeName}/${method.name}`;
  try {
    const result = await inSpan(name, { kind, parent, attributes: { "rpc.system": "grpc" } }, fn);
    end?.({ rpc_grpc_status_code: "0" });
    return result;
  } catch (err) {
    const code = (err as { code?: unknown } | undefined)?.code;
    end?.({ rpc_grpc_status_code: String(typeof code === "number" ? code : 2) });
    throw err;
  }
}

export const rpcClientSpan = <T>(method: DescMethod, fn: (headers: Record<string, string>) => Promise<T>) =>
  rpcSpan(SpanKind.CLIENT, method, undefined, () => fn(traceHeaders()));

export const rpcServerSpan = <T>(method: DescMethod, headers: Record<string, unknown>, fn: () => Promise<T>) =>
  rpcSpan(SpanKind.SERVER, method, contextFromHeaders(headers), fn);

export const activeContext = (): Context => context.active();

export { ROOT_CONTEXT, SpanKind, type Context };
