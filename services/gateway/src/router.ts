import Router from "@koa/router";
import type { GatewayState } from "./context.js";

/**
 * Every router of the gateway: a route answers its canonical path only, byte for byte, so no other
 * spelling can skip the middleware keyed on it (docs/edge.md, "Paths"); any other is the one 404.
 */
export function gatewayRouter(): Router<GatewayState> {
  return new Router<GatewayState>({ strict: true, sensitive: true });
}
