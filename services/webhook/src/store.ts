import type { Db } from "mongodb";
import type { AuditCarrier } from "@pi/common/store/audit";
import type { PartnerMode } from "@pi/common/rules/mode";
import type { EndpointHealthDoc } from "./endpoint-health.js";
import type { WebhookEventType } from "@pi/common/events/webhook-events";
import type { DeliveryState } from "./delivery-states.js";
import type { AttemptOutcome } from "./outbound.js";

// Four collections, written one document at a time: webhook_events (its _id derived from the source event's),
// webhook_queue (the pending ones only), webhook_claims (queue.ts) and webhook_endpoints (endpoint-health.ts).

export interface AttemptRecord extends Pick<AttemptOutcome, "statusCode" | "durationMs" | "error" | "responseExcerpt"> {
  number: number;
  startedAt: Date;
}

export interface WebhookEventDoc extends AuditCarrier {
  _id: string; // evt_...
  sourceEventId: string; // unique: one webhook event per connection event, however often Kafka redelivers it
  partnerId: string;
  connectionId: string;
  mode: PartnerMode;
  type: WebhookEventType;
  body: string;
  createdAt: Date;
  /** The connection event's Kafka offset: orders a batch's events (one partition per partner). */
  seq: number;
  state: DeliveryState;
  attempts: number;
  attemptLog: AttemptRecord[];
  nextAttemptAt: Date | null;
  deliveredAt?: Date;
  trace?: Record<string, string>;
}

/** What an attempt needs, copied from the event so the dispatcher never has to read the event. */
export interface QueueDoc {
  _id: string; // the event's id
  partnerId: string;
  dueAt: Date;
  /** Attempts made when this entry was last scheduled; tells a stale entry from a current one. */
  attempts: number;
  body: string;
  createdAt: Date;
  trace?: Record<string, string>;
}

export function queueEntry(event: WebhookEventDoc): QueueDoc {
  return {
    _id: event._id,
    partnerId: event.partnerId,
    dueAt: event.nextAttemptAt ?? new Date(),
    attempts: event.attempts,
    body: event.body,
    createdAt: event.createdAt,
    ...(event.trace ? { trace: event.trace } : {}),
  };
}

/** The right to make one slot's attempt, `${eventId}:${attempts}:${dueAt}` (queue.ts). */
export interface ClaimDoc {
  _id: string;
  eventId: string;
  expiresAt: Date;
  holder?: string | null;
}

export type WebhookStore = Awaited<ReturnType<typeof openWebhookStore>>;

export async function openWebhookStore(db: Db) {
  const events = db.collection<WebhookEventDoc>("webhook_events");
  await events.createIndex({ sourceEventId: 1 }, { unique: true, name: "source_event_unique" });
  await events.createIndex({ partnerId: 1, createdAt: -1 }, { name: "by_partner" });
  await events.createIndex({ partnerId: 1, mode: 1, createdAt: -1, seq: -1, _id: -1 }, { name: "by_partner_mode" });
  const queue = db.collection<QueueDoc>("webhook_queue");
  await queue.createIndex({ dueAt: 1 }, { name: "due" });
  const claims = db.collection<ClaimDoc>("webhook_claims");
  await claims.createIndex({ expiresAt: 1 }, { name: "expiry" });
  return { events, queue, claims, endpoints: db.collection<EndpointHealthDoc>("webhook_endpoints") };
}
