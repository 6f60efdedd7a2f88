import type { Middleware } from "koa";
import { RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import { PartnerError } from "./errors.js";
import type { GatewayContext, GatewayState } from "./router.js";

// The spec's two limits, in memory per gateway instance as it says (docs/edge.md).

/** Retry-After for a limiter's answer: whole seconds, rounded up, and never 0. */
export function retryAfterSeconds(msBeforeNext: number): number {
  return Math.max(1, Math.ceil(msBeforeNext / 1000));
}

/** Takes one point from the key's budget of `points` per `duration` seconds, or throws the one 429 with Retry-After. */
function rateLimit(points: number, duration: number, keyOf: (ctx: GatewayContext) => string): Middleware<GatewayState> {
  const limiter = new RateLimiterMemory({ points, duration });
  return async (ctx, next) => {
    try {
      await limiter.consume(keyOf(ctx));
    } catch (res) {
      if (!(res instanceof RateLimiterRes)) throw res;
      throw new PartnerError("rate_limited", {
        headers: { "Retry-After": String(retryAfterSeconds(res.msBeforeNext)) },
      });
    }
    await next();
  };
}

/** Per partner on /v1: runs after the bearer check, which sets the principal. */
export const partnerRateLimit = (perSecond: number) => rateLimit(perSecond, 1, (ctx) => ctx.state.principal!.partnerId);

/** Per client IP, before the body is read: every attempt counts. `ctx.ip` is what trusted proxies saw. */
export const tokenRateLimit = (perMinute: number) => rateLimit(perMinute, 60, (ctx) => ctx.ip || "unknown");
