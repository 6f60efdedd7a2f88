import { pushAudit } from "@pi/common/audit-trail";
import type { AuditEntry } from "@pi/common/audit";
import * as delivery from "./delivery-states.js";
import { queueEntry, type WebhookEventDoc, type WebhookStore } from "./store.js";

// The operator's resend and recover: a stored event goes back on the queue, due at once, with the
// same id and body; each attempt signs afresh. Its retry window starts again from now (a resend of
// a day-old event must not fail for want of time), and its attempts keep counting on, so the log
// of every attempt stays whole.

/** Events of a partner that a recover since `since` re-queues: failed (or never sendable) since then. */
export function recoverable(events: WebhookEventDoc[], since: Date): WebhookEventDoc[] {
  return events.filter((e) => delivery.recover(e, since));
}

/** Re-queues one event; `audit` is the operator's record of it, stored in the same update. */
export async function requeue(
  store: WebhookStore,
  event: WebhookEventDoc,
  audit: AuditEntry,
  now = new Date(),
): Promise<WebhookEventDoc> {
  const step = delivery.requeue(now);
  const pending: WebhookEventDoc = { ...event, ...step };
  await store.events.updateOne({ _id: event._id }, { $set: step, ...pushAudit(audit) });
  const { _id, ...entry } = { ...queueEntry(pending), createdAt: now };
  await store.queue.updateOne({ _id }, { $set: entry }, { upsert: true });
  return pending;
}
