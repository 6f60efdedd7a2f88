import type { Middleware } from "koa";
import { connectionv1 } from "@pi/proto";
import type { ConnectionClient } from "@pi/common/clients";
import { modeToProto } from "@pi/common/mode";
import type { GatewayContext, GatewayState } from "../context.js";
import { gatewayRouter } from "../router.js";
import { PartnerError } from "../errors.js";
import { requireScope } from "../middleware.js";
import { allowedMethods } from "../allowed-methods.js";
import { CONNECTION_ID, CONNECTION_SCOPE, connectionResource } from "./connections.js";

// Test helpers (docs/edge.md, "Test helpers"): POST /v1/test_helpers/connections/{id}/{act} drives
// one of the partner's own test connections through what its caregiver or time would do. They exist
// only for test tokens: for a live token the router is never reached, so every request is answered
// by what follows it, the one 404 of a path no route has (status, headers and body alike).

const { TestHelperAct } = connectionv1;

export const TEST_HELPER_ACTS = {
  approve: TestHelperAct.APPROVE,
  decline: TestHelperAct.DECLINE,
  sever: TestHelperAct.SEVER,
  expire: TestHelperAct.EXPIRE,
} as const;

export function testHelperRoutes(connections: ConnectionClient) {
  const router = gatewayRouter();
  for (const [name, act] of Object.entries(TEST_HELPER_ACTS)) {
    router.post(
      `/v1/test_helpers/connections/:id/${name}`,
      requireScope(CONNECTION_SCOPE),
      async (ctx: GatewayContext) => {
        // Any other shape gets the same 404 as an unknown id, without a call.
        const id = ctx.params.id ?? "";
        if (!CONNECTION_ID.test(id)) throw new PartnerError("not_found");
        const { partnerId, mode } = ctx.state.principal!;
        const res = await connections.actOnTestConnection({ partnerId, id, mode: modeToProto(mode), act });
        ctx.body = connectionResource(res.connection);
      },
    );
  }
  return router;
}

/** The helpers' routes (and their 405) for a test token; a live token goes past them as past a path no route has. */
export function testModeOnly(router: ReturnType<typeof testHelperRoutes>): Middleware<GatewayState> {
  const routes = router.routes() as unknown as Middleware<GatewayState>;
  const methods = allowedMethods(router);
  return (ctx, next) => (ctx.state.principal?.mode === "test" ? routes(ctx, () => methods(ctx, next)) : next());
}
