import type { Middleware } from "koa";
import { inSpan, meter, SpanKind } from "@pi/common";

const requestDuration = () => meter().createHistogram("http.server.duration", { unit: "ms", description: "Duration of partner requests" });

/**
 * One SERVER span per partner request, the root of its trace: a partner's own trace headers are
 * not trusted, so every trace starts at our edge. Also the request duration metric.
 */
export function traceRequests(): Middleware {
  return (ctx, next) => {
    const started = performance.now();
    return inSpan(`${ctx.method} ${ctx.path.replace(/\/(con|file)_[A-Za-z0-9]+/, "/{id}")}`, { kind: SpanKind.SERVER }, async (span) => {
      await next();
      span.setAttribute("http.response.status_code", ctx.status);
    }).finally(() => requestDuration().record(performance.now() - started, { "http.request.method": ctx.method, "http.response.status_code": ctx.status }));
  };
}
