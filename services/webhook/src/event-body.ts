import { createHash } from "node:crypto";
import type { eventsv1 } from "@pi/proto";
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from "@pi/common/webhook-events";

// The webhook event a partner receives, made once from a connection event and stored as the exact
// bytes every attempt sends: {id, type, created, data: {connection_id, status}}, nothing else.

export const EVENT_TYPES = WEBHOOK_EVENT_TYPES;
export type EventType = WebhookEventType;

export interface WebhookEvent {
  id: string;
  type: EventType;
  created: number;
  data: { connection_id: string; status: "pending" | "approved" | "expired" | "revoked" };
}

export type SourceCheck =
  | {
      ok: true;
      sourceEventId: string;
      partnerId: string;
      connectionId: string;
      type: EventType;
      status: WebhookEvent["data"]["status"];
      occurredAtMs: number;
      /** Set when the source's status disagrees with its type; the type wins, as the spec ties them. */
      statusMismatch?: string;
    }
  | { ok: false; reason: string };

const isOneOf = <T extends string>(list: readonly T[], v: string): v is T => (list as readonly string[]).includes(v);

// The spec fixes data.status by the event type.
const STATUS_OF: Record<EventType, WebhookEvent["data"]["status"]> = {
  "connection.approved": "approved",
  "connection.revoked": "revoked",
};

/** Whether a connection event from Kafka can become a webhook event; anything else is a bug upstream. */
export function checkSourceEvent(ev: eventsv1.ConnectionEvent, nowMs: number): SourceCheck {
  if (!ev.eventId) return { ok: false, reason: "event_id is empty" };
  if (!ev.partnerId) return { ok: false, reason: "partner_id is empty" };
  if (!ev.connectionId.startsWith("con_")) return { ok: false, reason: "connection_id is not a con_ id" };
  if (!isOneOf(EVENT_TYPES, ev.type))
    return { ok: false, reason: `type ${JSON.stringify(ev.type)} is not a webhook event type` };
  const status = STATUS_OF[ev.type];
  return {
    ok: true,
    sourceEventId: ev.eventId,
    partnerId: ev.partnerId,
    connectionId: ev.connectionId,
    type: ev.type,
    status,
    occurredAtMs: ev.occurredAt > 0n ? Number(ev.occurredAt) : nowMs,
    ...(ev.status !== status ? { statusMismatch: ev.status } : {}),
  };
}

/** The exact JSON body of a webhook event. `created` is the Unix second of the state change. */
export function webhookBody(
  id: string,
  type: EventType,
  occurredAtMs: number,
  connectionId: string,
  status: WebhookEvent["data"]["status"],
): string {
  const event: WebhookEvent = {
    id,
    type,
    created: Math.floor(occurredAtMs / 1000),
    data: { connection_id: connectionId, status },
  };
  return JSON.stringify(event);
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/**
 * The evt_ id of the webhook event made from a connection event: derived from the source event id
 * (the same shape as every other id: evt_ and 22 base62 characters), so every copy of one
 * connection event, however often Kafka delivers it, names the same webhook event.
 */
export function webhookEventId(sourceEventId: string): string {
  const digest = createHash("sha256").update(`pi.webhook-event.v1:${sourceEventId}`).digest();
  let out = "";
  for (let i = 0; i < 22; i++) out += base62[digest[i]! % 62];
  return `evt_${out}`;
}
