import type { Context } from "koa";
import type { HealthClient } from "@pi/common/rpc/clients";
import { healthv1 } from "@pi/proto";
import { gatewayRouter } from "../router.js";

function answer(ctx: Context, failing: string[]): void {
  ctx.set("Cache-Control", "no-store");
  ctx.status = failing.length === 0 ? 200 : 503;
  ctx.body = failing.length === 0 ? { status: "ready" } : { status: "not_ready", failing };
}

// /readyz/traffic (the pod's probe) asks only warm: a gateway stays in rotation while a service behind
// it is down, answering the fast envelope 503, rather than every replica leaving.
export default function healthRoutes(services: Record<string, HealthClient>, warm: () => boolean = () => true) {
  const router = gatewayRouter();
  router.get("/healthz", (ctx) => {
    ctx.body = { status: "ok" };
  });
  router.get("/readyz/traffic", (ctx) => answer(ctx, warm() ? [] : ["gateway"]));
  router.get("/readyz", async (ctx) => {
    const results = await Promise.all(
      Object.entries(services).map(async ([name, client]) => {
        const res = await client.check({}, { timeoutMs: 1500 }).catch(() => undefined);
        return [name, res?.status === healthv1.HealthCheckResponse_ServingStatus.SERVING] as const;
      }),
    );
    answer(ctx, [...(warm() ? [] : ["gateway"]), ...results.filter(([, ok]) => !ok).map(([name]) => name)]);
  });
  return router;
}
