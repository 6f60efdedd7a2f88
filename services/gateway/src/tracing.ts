import type Router from "@koa/router";
import type { Middleware } from "koa";
import { httpServerDuration, metricsRecording } from "@pi/common/runtime/metrics";
import { inSpan, SpanKind } from "@pi/common/runtime/telemetry";
import type { GatewayState } from "./router.js";

// From the path alone, so a request refused before its route ran (401, 429) still counts under its
// route; a path no route has gets none (never the raw path: a partner chooses it).
export function routeTemplates(routers: Router<GatewayState>[]): (path: string) => string | undefined {
  return (path) => {
    for (const router of routers) {
      const layer = router.match(path, "GET").path[0];
      if (layer) return String(layer.path).replace(/:([A-Za-z0-9_]+)/g, "{$1}");
    }
    return undefined;
  };
}

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"]);

/** The root of its request's trace: a partner's trace headers are not trusted. */
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
