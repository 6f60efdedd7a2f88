import type { Middleware } from "koa";
import type { DeprecationRule } from "@pi/common/runtime/settings";
import type { GatewayState } from "./context.js";

// API_DEPRECATIONS: a deprecated route's answers carry Deprecation (RFC 9745), Sunset (RFC 8594) and
// Link rel="deprecation" (docs/edge.md, "Versioning").

interface CompiledRule {
  rule: DeprecationRule;
  method?: string;
  pattern: RegExp;
}

function compile(rule: DeprecationRule): CompiledRule {
  const [method, path] = rule.route.includes(" ") ? rule.route.split(" ") : [undefined, rule.route];
  if (!method) return { rule, pattern: new RegExp(`^${path}(/|$)`) };
  const segments = path!.split("/").map((s) => (/^\{.+\}$/.test(s) ? "[^/]+" : s.replace(/[.]/g, "\\.")));
  return { rule, method, pattern: new RegExp(`^${segments.join("/")}/?$`) };
}

/** The rule for a request: one naming its operation wins over one naming its whole version. */
export function deprecationFor(
  rules: readonly DeprecationRule[],
  method: string,
  path: string,
): DeprecationRule | undefined {
  const compiled = rules.map(compile);
  const m = method === "HEAD" ? "GET" : method;
  return (
    compiled.find((c) => c.method === m && c.pattern.test(path))?.rule ??
    compiled.find((c) => c.method === undefined && c.pattern.test(path))?.rule
  );
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
  if (rules.length === 0) return (_ctx, next) => next();
  return async (ctx, next) => {
    const rule = deprecationFor(rules, ctx.method, ctx.path);
    if (rule) ctx.set(deprecationHeaders(rule));
    await next();
  };
}
