import type { Middleware } from "koa";
import type { DeprecationRule } from "@pi/common/runtime/settings";
import type { GatewayState } from "./router.js";

// API_DEPRECATIONS: a deprecated route's answers carry Deprecation (RFC 9745), Sunset (RFC 8594) and
// Link rel="deprecation" (docs/edge.md, "Versioning").

/** A route names a whole version (`/v1`) or one operation (`GET /v1/files/{id}`). */
function routePattern(route: string): { method?: string; pattern: RegExp } {
  const [method, path] = route.includes(" ") ? route.split(" ") : [undefined, route];
  if (!method) return { pattern: new RegExp(`^${path}(/|$)`) };
  const segments = path!.split("/").map((s) => (/^\{.+\}$/.test(s) ? "[^/]+" : s.replace(/[.]/g, "\\.")));
  return { method, pattern: new RegExp(`^${segments.join("/")}/?$`) };
}

/** The rule for a request: one naming its operation wins over one naming its whole version. */
export function deprecationFor(
  rules: readonly DeprecationRule[],
  method: string,
  path: string,
): DeprecationRule | undefined {
  const m = method === "HEAD" ? "GET" : method;
  const matching = rules.filter((rule) => {
    const route = routePattern(rule.route);
    return (route.method === undefined || route.method === m) && route.pattern.test(path);
  });
  return matching.find((rule) => rule.route.includes(" ")) ?? matching[0];
}

export function deprecationHeaders(rule: DeprecationRule): Record<string, string> {
  return {
    Deprecation: `@${Math.floor(rule.deprecation.getTime() / 1000)}`,
    ...(rule.sunset ? { Sunset: rule.sunset.toUTCString() } : {}),
    ...(rule.link ? { Link: `<${rule.link}>; rel="deprecation"; type="text/html"` } : {}),
  };
}

/** Sets the headers before the route runs, so that its errors carry them too. */
export function deprecations(rules: readonly DeprecationRule[]): Middleware<GatewayState> {
  return async (ctx, next) => {
    const rule = deprecationFor(rules, ctx.method, ctx.path);
    if (rule) ctx.set(deprecationHeaders(rule));
    await next();
  };
}
