import { isWebhookEventType, WEBHOOK_EVENT_TYPES } from "@pi/common/events/webhook-events";
import { invalid } from "./errors.js";

// The query of GET /v1/events, each parameter at most once; anything else is a 400 naming it.

export const EVENTS_LIMIT_DEFAULT = 10;
export const EVENTS_LIMIT_MAX = 100;

/** One message for every starting_after that is not an event of yours: malformed, unknown, another partner's, the other mode's. */
export const STARTING_AFTER_MESSAGE = "starting_after is not one of your events.";

const EVENT_ID = /^evt_[0-9A-Za-z]{1,64}$/;
const KNOWN = new Set(["limit", "starting_after", "type"]);

/** The query as Koa parses it (a repeated parameter is an array), as ListEvents takes it; throws the 400 for anything off. */
export function parseEventsQuery(query: Record<string, string | string[] | undefined>) {
  for (const [name, value] of Object.entries(query)) {
    if (!KNOWN.has(name))
      throw invalid(`Unknown query parameter ${JSON.stringify(name)}; accepted: limit, starting_after, type.`, name);
    if (Array.isArray(value)) throw invalid(`${name} may be given once.`, name);
  }
  const { limit, starting_after: startingAfter, type } = query as Record<string, string | undefined>;
  if (limit !== undefined && (!/^[0-9]{1,3}$/.test(limit) || Number(limit) < 1 || Number(limit) > EVENTS_LIMIT_MAX))
    throw invalid(`limit must be an integer from 1 to ${EVENTS_LIMIT_MAX}.`, "limit");
  if (startingAfter !== undefined && !EVENT_ID.test(startingAfter))
    throw invalid(STARTING_AFTER_MESSAGE, "starting_after");
  if (type !== undefined && !isWebhookEventType(type))
    throw invalid(`type must be one of ${WEBHOOK_EVENT_TYPES.join(", ")}.`, "type");
  return {
    limit: limit === undefined ? EVENTS_LIMIT_DEFAULT : Number(limit),
    startingAfter: startingAfter ?? "",
    type: type ?? "",
  };
}

/** The list object from the events' stored bodies: the bytes their webhook deliveries carried. */
export function eventsListJson(bodies: readonly string[], hasMore: boolean): string {
  return `{"data":[${bodies.join(",")}],"has_more":${hasMore}}`;
}
