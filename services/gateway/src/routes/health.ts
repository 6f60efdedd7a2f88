import type { HealthClient } from "@pi/common";
import { healthv1 } from "@pi/proto";
import { gatewayRouter } from "../router.js";

/** Liveness, and readiness: every internal service answers SERVING (each checks its database and Kafka). */
export default function healthRoutes(services: Record<string, HealthClient>, warm: () => boolean = () => true) {
  const router = gatewayRouter();
  router.get("/healthz", (ctx) => {
    ctx.body = { status: "ok" };
  });
  router.get("/readyz", async (ctx) => {
    const results = await Promise.all(
      Object.entries(services).map(async ([name, client]) => {
        try {
          const res = await client.check({}, { timeoutMs: 1500 });
          return [name, res.status === healthv1.HealthCheckResponse_ServingStatus.SERVING] as const;
        } catch {
          return [name, false] as const;
        }
      }),
    );
    const failing = [...(warm() ? [] : ["gateway"]), ...results.filter(([, ok]) => !ok).map(([name]) => name)];
    ctx.set("Cache-Control", "no-store");
    ctx.status = failing.length === 0 ? 200 : 503;
    ctx.body = failing.length === 0 ? { status: "ready" } : { status: "not_ready", failing };
  });
  return router;
}
