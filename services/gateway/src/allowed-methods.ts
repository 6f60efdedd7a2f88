import type Router from "@koa/router";
import type { Middleware } from "koa";
import type { GatewayState } from "./context.js";
import { PartnerError } from "./errors.js";

/**
 * A router's allowedMethods, answered with the envelope: another method on a known path is the one
 * 405 with its Allow header; an unknown method (PROPFIND) the same 405 there and the one 404
 * elsewhere, never the router's bare 501.
 */
export function allowedMethods(router: Router<GatewayState>): Middleware<GatewayState> {
  const inner = router.allowedMethods() as unknown as Middleware<GatewayState>;
  return async (ctx, next) => {
    await inner(ctx, next);
    if (ctx.body == null && (ctx.status === 405 || ctx.status === 501)) {
      if (!ctx.response.get("Allow")) {
        ctx.remove("Allow");
        throw new PartnerError("not_found");
      }
      throw new PartnerError("method_not_allowed");
    }
  };
}
