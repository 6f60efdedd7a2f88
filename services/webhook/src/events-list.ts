import type { Filter } from "mongodb";
import type { WebhookEventType } from "@pi/common/events/webhook-events";
import type { WebhookEventDoc } from "./store.js";

// GET /v1/events as queries: a partner's events of one mode, newest first; the cursor is one of them.

export interface EventsPage {
  partnerId: string;
  mode: WebhookEventDoc["mode"];
  limit: number;
  type?: WebhookEventType;
}

/** The order of the list (and of the by_partner_mode index). */
export const EVENTS_ORDER = { createdAt: -1, seq: -1, _id: -1 } as const;

export type EventKey = Pick<WebhookEventDoc, "_id" | "createdAt" | "seq">;

/** Where the cursor event is looked up: only among the partner's own events of the mode, so a foreign id finds nothing. */
export const cursorFilter = (
  page: Pick<EventsPage, "partnerId" | "mode">,
  eventId: string,
): Filter<WebhookEventDoc> => ({ _id: eventId, partnerId: page.partnerId, mode: page.mode });

export function pageFilter(page: EventsPage, after?: EventKey): Filter<WebhookEventDoc> {
  const filter: Filter<WebhookEventDoc> = {
    partnerId: page.partnerId,
    mode: page.mode,
    ...(page.type ? { type: page.type } : {}),
  };
  if (!after) return filter;
  return {
    ...filter,
    $or: [
      { createdAt: { $lt: after.createdAt } },
      { createdAt: after.createdAt, seq: { $lt: after.seq } },
      { createdAt: after.createdAt, seq: after.seq, _id: { $lt: after._id } },
    ],
  } as Filter<WebhookEventDoc>;
}
