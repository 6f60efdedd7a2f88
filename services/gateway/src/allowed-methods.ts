import type Router from "@koa/router";
import type { Middleware } from "koa";
import type { GatewayState } from "./context.js";
import { PartnerError } from "./errors.js";

// The envelope's 405 with Allow on a known path, also for an unknown method (PROPFIND), and the one 404
// elsewhere: never the router's bare 501.
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
