import { webhookFailingEndpoints, webhookOldestPendingAge } from "@pi/common/runtime/metrics";
import type { WebhookStore } from "./store.js";

/** The webhook gauges, read at each scrape; "failing" is the rule of the "webhook endpoint failing" line. */
export async function refreshWebhookGauges(
  store: WebhookStore,
  failingAfterMs: number,
  now = new Date(),
): Promise<void> {
  const [oldest] = await store.queue
    .find({}, { projection: { createdAt: 1 } })
    .sort({ createdAt: 1 })
    .limit(1)
    .toArray();
  webhookOldestPendingAge.set(oldest ? Math.max(0, (now.getTime() - oldest.createdAt.getTime()) / 1000) : 0);
  webhookFailingEndpoints.set(
    await store.endpoints.countDocuments({ failingSince: { $lte: new Date(now.getTime() - failingAfterMs) } }),
  );
}
