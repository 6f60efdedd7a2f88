import type { Middleware } from "koa";
import { RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import type { GatewayContext, GatewayState } from "./context.js";
import { PartnerError } from "./errors.js";

// The spec's two limits, in memory per gateway instance as it says (docs/edge.md).

/** Retry-After for a limiter's answer: whole seconds, rounded up, and never 0. */
export function retryAfterSeconds(msBeforeNext: number): number {
  return Math.max(1, Math.ceil(msBeforeNext / 1000));
}

/** Takes one point from `key`'s budget, or throws the one 429 with Retry-After; no key, no limit. */
export function rateLimit(
  limiter: RateLimiterMemory,
  keyOf: (ctx: GatewayContext) => string | undefined,
): Middleware<GatewayState> {
  return async (ctx, next) => {
    const key = keyOf(ctx);
    if (key !== undefined) {
      try {
        await limiter.consume(key);
      } catch (res) {
        if (!(res instanceof RateLimiterRes)) throw res;
        throw new PartnerError("rate_limited", {
          headers: { "Retry-After": String(retryAfterSeconds(res.msBeforeNext)) },
        });
      }
    }
    await next();
  };
}

/** Per partner on /v1: runs after the bearer check, which sets the principal. */
export function partnerRateLimit(perSecond: number): Middleware<GatewayState> {
  const limiter = new RateLimiterMemory({ keyPrefix: "v1", points: perSecond, duration: 1 });
  return rateLimit(limiter, (ctx) => ctx.state.principal?.partnerId);
}

/** Per client IP, before the body is read: every attempt counts. `ctx.ip` is what trusted proxies saw. */
export function tokenRateLimit(perMinute: number): Middleware<GatewayState> {
  const limiter = new RateLimiterMemory({ keyPrefix: "token", points: perMinute, duration: 60 });
  return rateLimit(limiter, (ctx) =>
    ctx.method === "POST" && ctx.path === "/oauth/token" ? ctx.ip || "unknown" : undefined,
  );
}
