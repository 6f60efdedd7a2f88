import type { Filter } from "mongodb";
import { every, type Periodic } from "@pi/common/background/periodic";
import type { Logger } from "@pi/common/runtime/logger";
import { sweepClaims } from "./queue.js";
import { EVENTS_ORDER, pageFilter, type EventKey } from "./events-list.js";
import type { WebhookEventDoc, WebhookStore } from "./store.js";

// How long webhook events (and old slot claims) are kept (docs/webhooks.md, "Retention"); test events: a count too.

export interface EventRetention {
  keepMs: number;
  testPerPartner: number;
}

const RETENTION_SWEEP_EVERY_MS = 10 * 60_000;

/** What a sweep may delete: nothing still queued, nothing with an audit record waiting. */
const settled: Filter<WebhookEventDoc> = { state: { $ne: "pending" }, $nor: [{ "audit.0": { $exists: true } }] };

/** One round; every delete is idempotent, so replicas running rounds at once only repeat each other. */
export async function sweepEvents(
  store: WebhookStore,
  policy: EventRetention,
  now = new Date(),
): Promise<{ expired: number; overBound: number }> {
  const pastRetention = { createdAt: { $lt: new Date(now.getTime() - policy.keepMs) }, ...settled };
  const expired = (await store.events.deleteMany(pastRetention)).deletedCount;
  let overBound = 0;
  const partners = await store.events
    .aggregate<{ _id: string; n: number }>([
      { $match: { mode: "test" } },
      { $group: { _id: "$partnerId", n: { $sum: 1 } } },
      { $match: { n: { $gt: policy.testPerPartner } } },
    ])
    .toArray();
  for (const { _id: partnerId } of partners) {
    const page = { partnerId, mode: "test" as const, limit: policy.testPerPartner };
    const [last] = await store.events
      .find(pageFilter(page), { projection: { _id: 1, createdAt: 1, seq: 1 } })
      .sort(EVENTS_ORDER)
      .skip(policy.testPerPartner - 1)
      .limit(1)
      .toArray();
    if (!last) continue;
    overBound += (await store.events.deleteMany({ $and: [pageFilter(page, last as EventKey), settled] })).deletedCount;
  }
  return { expired, overBound };
}

export function startRetentionSweep(store: WebhookStore, policy: EventRetention, logger: Logger): Periodic {
  return every(
    "webhook event retention",
    RETENTION_SWEEP_EVERY_MS,
    async () => {
      const { expired, overBound } = await sweepEvents(store, policy);
      if (expired + overBound > 0) logger.info({ expired, overBound }, "webhook events past retention deleted");
      await sweepClaims(store);
    },
    logger,
  );
}
