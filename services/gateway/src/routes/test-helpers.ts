import type { Middleware } from "koa";
import { connectionv1 } from "@pi/proto";
import type { ConnectionClient } from "@pi/common/rpc/clients";
import { modeToProto } from "@pi/common/rules/mode";
import type { GatewayContext, GatewayState } from "../context.js";
import { gatewayRouter } from "../router.js";
import { PartnerError } from "../errors.js";
import { requireScope } from "../middleware.js";
import { allowedMethods } from "../allowed-methods.js";
import { CONNECTION_ID, CONNECTION_SCOPE, connectionResource } from "./connections.js";

// POST /v1/test_helpers/connections/{id}/{act} (docs/edge.md): for test tokens only; a live token
// never reaches the router and gets the one 404 of a path no route has.

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

export function testModeOnly(router: ReturnType<typeof testHelperRoutes>): Middleware<GatewayState> {
  const routes = router.routes() as unknown as Middleware<GatewayState>;
  const methods = allowedMethods(router);
  return (ctx, next) => (ctx.state.principal?.mode === "test" ? routes(ctx, () => methods(ctx, next)) : next());
}
