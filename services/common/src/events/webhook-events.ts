// The partner-visible event types: the spec's two, and no others (no decline, no expiry, ever). The
// webhook service makes events of these types only; GET /v1/events filters by them.
export const WEBHOOK_EVENT_TYPES = ["connection.approved", "connection.revoked"] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

export const isWebhookEventType = (v: string): v is WebhookEventType =>
  (WEBHOOK_EVENT_TYPES as readonly string[]).includes(v);
