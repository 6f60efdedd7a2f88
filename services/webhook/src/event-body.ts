import { createHash } from "node:crypto";
import type { eventsv1 } from "@pi/proto";
import { newIdFrom } from "@pi/common/rules/ids";
import { isWebhookEventType, type WebhookEventType } from "@pi/common/events/webhook-events";

// The webhook event a partner receives, made once and stored as the exact bytes every attempt sends.

const STATUS_OF = {
  "connection.approved": "approved",
  "connection.revoked": "revoked",
} as const satisfies Record<WebhookEventType, string>;

type Status = (typeof STATUS_OF)[WebhookEventType];

export interface SourceEvent {
  ok: true;
  sourceEventId: string;
  partnerId: string;
  connectionId: string;
  type: WebhookEventType;
  status: Status;
  occurredAtMs: number;
}

export type SourceCheck = SourceEvent | { ok: false; reason: string };

export function checkSourceEvent(ev: eventsv1.ConnectionEvent, nowMs: number): SourceCheck {
  if (!ev.eventId) return { ok: false, reason: "event_id is empty" };
  if (!ev.partnerId) return { ok: false, reason: "partner_id is empty" };
  if (!ev.connectionId.startsWith("con_")) return { ok: false, reason: "connection_id is not a con_ id" };
  if (!isWebhookEventType(ev.type))
    return { ok: false, reason: `type ${JSON.stringify(ev.type)} is not a webhook event type` };
  // The type decides the status, as the spec ties them; the source's own status field is not read.
  return {
    ok: true,
    sourceEventId: ev.eventId,
    partnerId: ev.partnerId,
    connectionId: ev.connectionId,
    type: ev.type,
    status: STATUS_OF[ev.type],
    occurredAtMs: ev.occurredAt > 0n ? Number(ev.occurredAt) : nowMs,
  };
}

/** The exact JSON body of a webhook event. `created` is the Unix second of the state change. */
export function webhookBody(id: string, src: Pick<SourceEvent, "type" | "occurredAtMs" | "connectionId" | "status">) {
  const { type, connectionId, status } = src;
  const created = Math.floor(src.occurredAtMs / 1000);
  return JSON.stringify({ id, type, created, data: { connection_id: connectionId, status } });
}

/** The evt_ id of a connection event's webhook event: the same for every copy Kafka delivers. */
export function webhookEventId(sourceEventId: string): string {
  return newIdFrom("evt", createHash("sha256").update(`pi.webhook-event.v1:${sourceEventId}`).digest());
}
