import { webhookFailingEndpoints, webhookOldestPendingAge } from "@pi/common/metrics";
import type { WebhookStore } from "./store.js";

/**
 * The webhook gauges read from the database, read by every replica at each scrape (they report
 * the same values): the age of the oldest event still queued for delivery (its retry window's
 * start) and how many partner endpoints are failing (every attempt failed for the failing period,
 * endpoint-health.ts: the same rule as the "webhook endpoint failing" log line).
 */
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
