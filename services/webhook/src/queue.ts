import type { Filter } from "mongodb";
import { insertNew } from "@pi/common/store/persistence";
import { takeLease, type LeaseFields } from "@pi/common/background/lease";
import type { AuditEntry } from "@pi/common/store/audit";
import * as delivery from "./delivery-states.js";
import { queueEntry, type QueueDoc, type WebhookEventDoc, type WebhookStore } from "./store.js";

// The queue's entries and the claims on their slots. A claim's _id names the slot (event, attempts, due time), so
// one replica's insert succeeds; a dead holder's claim is taken over as a lease once it ran out.

const SLOT_LEASE: LeaseFields = { until: "expiresAt", holder: "holder" };
/** Claims are kept long after their lease (a late reader of an old slot must still lose), then dropped. */
const CLAIM_KEEP_MS = 60 * 60_000;

const slotKey = (entry: QueueDoc) => `${entry._id}:${entry.attempts}:${entry.dueAt.getTime()}`;

/** The event as long as it is still where the queue entry says: pending, with the same attempts. */
export function current(entry: QueueDoc): Filter<WebhookEventDoc> {
  return { _id: entry._id, state: "pending", attempts: entry.attempts };
}

/** The entries whose current slot this replica now holds, for `leaseMs`; the others belong to other replicas. */
export async function claim(store: WebhookStore, entries: QueueDoc[], now: Date, leaseMs: number): Promise<QueueDoc[]> {
  const expiresAt = new Date(now.getTime() + leaseMs);
  const claims = entries.map((e) => ({ _id: slotKey(e), eventId: e._id, expiresAt }));
  const taken = new Set((await insertNew(store.claims, claims)).map((c) => c._id));
  const won = entries.filter((e) => !taken.has(slotKey(e)));
  for (const entry of entries) {
    // A claim can only have run out if its slot came due more than a lease ago: then its holder
    // died before moving the entry on, and the slot may be taken over, once.
    if (
      taken.has(slotKey(entry)) &&
      entry.dueAt.getTime() + leaseMs < now.getTime() &&
      (await takeLease(store.claims, { _id: slotKey(entry) }, SLOT_LEASE, { ms: leaseMs })) !== null
    )
      won.push(entry);
  }
  return won;
}

export async function release(store: WebhookStore, eventId: string, dueAt: Date): Promise<void> {
  await store.queue.updateOne({ _id: eventId }, { $set: { dueAt } });
}

export async function moveOn(
  store: WebhookStore,
  eventId: string,
  attempts: number,
  dueAt: Date | null,
): Promise<void> {
  if (dueAt) await store.queue.updateOne({ _id: eventId }, { $set: { dueAt, attempts } });
  else await store.queue.deleteOne({ _id: eventId });
}

/** After an outcome could not be stored because the event moved on: make the entry match the event. */
export async function resync(store: WebhookStore, eventId: string): Promise<void> {
  const event = await store.events.findOne({ _id: eventId });
  if (event && event.state === "pending")
    await moveOn(store, eventId, event.attempts, event.nextAttemptAt ?? new Date());
  else await store.queue.deleteOne({ _id: eventId });
}

export async function sweepClaims(store: WebhookStore): Promise<void> {
  await store.claims.deleteMany({ expiresAt: { $lt: new Date(Date.now() - CLAIM_KEEP_MS) } });
}

// The operator's resend and recover, `audit` in the same update: due at once, and the retry window starts again.
export async function requeue(
  store: WebhookStore,
  event: WebhookEventDoc,
  audit: AuditEntry,
  now = new Date(),
): Promise<WebhookEventDoc> {
  const step = delivery.requeue(now);
  const pending: WebhookEventDoc = { ...event, ...step };
  await store.events.updateOne({ _id: event._id }, { $set: step, $push: { audit } });
  const { _id, ...entry } = { ...queueEntry(pending), createdAt: now };
  await store.queue.updateOne({ _id }, { $set: entry }, { upsert: true });
  return pending;
}
