import type { WebhookClient } from "@pi/common/rpc/clients";
import { modeToProto } from "@pi/common/rules/mode";
import { eventsListJson, parseEventsQuery } from "../events-query.js";
import { requireScope } from "../middleware.js";
import { CONNECTION_SCOPE } from "./connections.js";
import { gatewayRouter } from "../router.js";

/** GET /v1/events: the partner's own webhook events of the token's mode, newest first; connection events, so their scope. */
export default function eventRoutes(webhooks: WebhookClient) {
  const router = gatewayRouter();
  router.get("/v1/events", requireScope(CONNECTION_SCOPE), async (ctx) => {
    const { partnerId, mode } = ctx.state.principal!;
    const res = await webhooks.listEvents({ partnerId, mode: modeToProto(mode), ...parseEventsQuery(ctx.query) });
    ctx.type = "application/json; charset=utf-8";
    ctx.body = eventsListJson(res.events, res.hasMore);
  });
  return router;
}
