import Router from "@koa/router";
import type { Middleware, ParameterizedContext } from "koa";
import type { commonv1 } from "@pi/proto";
import { modeToProto } from "@pi/common/rules/mode";
import type { Principal } from "./bearer.js";
import { PartnerError } from "./errors.js";

export interface GatewayState {
  requestId: string;
  principal?: Principal;
}

export type GatewayContext = ParameterizedContext<GatewayState>;

export const modeOf = (ctx: GatewayContext): commonv1.Mode => modeToProto(ctx.state.principal!.mode);

// A route answers its canonical path only, byte for byte, so no other spelling can skip the middleware
// keyed on it (docs/edge.md, "Paths").
export function gatewayRouter(): Router<GatewayState> {
  return new Router<GatewayState>({ strict: true, sensitive: true });
}

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
