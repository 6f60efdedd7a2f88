import Router from "@koa/router";
import type { GatewayState } from "./context.js";

/**
 * Every router of the gateway. One rule for paths (docs/edge.md, "Paths"): a route answers its
 * canonical path only, byte for byte (case-sensitive, no trailing slash), so no other spelling can
 * reach a route while skipping the middleware keyed on the canonical path (the per-IP limit of
 * POST /oauth/token, the bearer and per-partner limit of /v1). Any other spelling is the one 404.
 */
export function gatewayRouter(): Router<GatewayState> {
  return new Router<GatewayState>({ strict: true, sensitive: true });
}
