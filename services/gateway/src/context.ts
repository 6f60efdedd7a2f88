import type { ParameterizedContext } from "koa";
import type { Principal } from "./bearer.js";

export interface GatewayState {
  requestId: string;
  principal?: Principal;
}

export type GatewayContext = ParameterizedContext<GatewayState>;
