import Router from "@koa/router";
import type { GatewayState } from "./context.js";

// A route answers its canonical path only, byte for byte, so no other spelling can skip the middleware
// keyed on it (docs/edge.md, "Paths").
export function gatewayRouter(): Router<GatewayState> {
  return new Router<GatewayState>({ strict: true, sensitive: true });
}
