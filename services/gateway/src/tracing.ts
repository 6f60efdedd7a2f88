import type { Middleware } from "koa";
import { httpServerDuration, metricsRecording } from "@pi/common/metrics";
import { inSpan, SpanKind } from "@pi/common/telemetry";

/**
 * The route templates of the gateway's routers, as OpenAPI writes them ("/v1/files/{id}"), and the
 * one a path belongs to: the span's name and the `http_route` label. Found from the path alone, so
 * that a request refused before its route ran (401, 429) still counts under it; a path no route
 * has gets none (never the raw path: a partner chooses it).
 */
export function routeTemplates(routers: { stack: { path: unknown }[] }[]): (path: string) => string | undefined {
  const templates = [
    ...new Set(
      routers.flatMap((r) => r.stack.map((layer) => layer.path)).filter((p): p is string => typeof p === "string"),
    ),
  ].map((path) => ({
    template: path.replace(/:([A-Za-z0-9_]+)/g, "{$1}"),
    segments: path.split("/"),
  }));
  return (path) => {
    const segments = path.split("/");
    const found = templates.find(
      (t) =>
        t.segments.length === segments.length &&
        t.segments.every((s, i) => (s.startsWith(":") ? segments[i] !== "" : s === segments[i])),
    );
    return found?.template;
  };
}

/**
 * One SERVER span per partner request, the root of its trace: a partner's own trace headers are
 * not trusted, so every trace starts at our edge. Also the request duration metric,
 * http_server_request_duration_seconds (docs/observability.md).
 */
const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"]);

export function traceRequests(routeOf: (path: string) => string | undefined): Middleware {
  return (ctx, next) => {
    const started = performance.now();
    const route = routeOf(ctx.path);
    return inSpan(`${ctx.method} ${route ?? "(no route)"}`, { kind: SpanKind.SERVER }, async (span) => {
      await next();
      span.setAttribute("http.response.status_code", ctx.status);
    }).finally(() => {
      if (metricsRecording())
        httpServerDuration.observe(
          {
            http_request_method: METHODS.has(ctx.method) ? ctx.method : "_OTHER",
            http_route: route ?? "",
            http_response_status_code: ctx.status,
          },
          (performance.now() - started) / 1000,
        );
    });
  };
}
