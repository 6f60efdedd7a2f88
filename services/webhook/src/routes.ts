import { ErrorReason, RpcError, Status, serviceError } from "@pi/common/rpc/errors";
import type { Router } from "@pi/common/rpc/server";
import { webhookv1 } from "@pi/proto";
import type { WebhookEventType } from "@pi/common/events/webhook-events";
import type { AuditEntry, AuditTrail } from "@pi/common/store/audit";
import type { Logger } from "@pi/common/runtime/logger";
import type { Outbox } from "@pi/common/store/persistence";
import type { Settings } from "@pi/common/runtime/settings";
import { modeFromProto } from "@pi/common/rules/mode";
import { cursorFilter, EVENTS_ORDER, pageFilter, type EventKey, type EventsPage } from "./events-list.js";
import { failingAfterMs, isFailing } from "./endpoint-health.js";
import { recoverable, type DeliveryState } from "./delivery-states.js";
import { requeue } from "./queue.js";
import type { WebhookEventDoc, WebhookStore } from "./store.js";

export interface WebhookDeps {
  settings: Settings;
  logger: Logger;
  store: WebhookStore;
  poke: () => void;
  /** The operator's re-queues are recorded in each event's document (queue.ts, requeue), refusals alone. */
  trail: Pick<AuditTrail, "entry" | "refusals">;
  eventsAudit: Pick<Outbox<WebhookEventDoc, AuditEntry>, "afterWrite">;
}

const MAX_LIST = 1000;
const EVENT_ID = /^evt_[A-Za-z0-9]{1,64}$/;

/** The one answer for a starting_after that is not an event of this partner and mode (unknown, another partner's, the other mode's, swept). */
export const STARTING_AFTER_UNKNOWN = "starting_after is not one of your events.";

export function deliveryOf(doc: WebhookEventDoc) {
  return {
    eventId: doc._id,
    type: doc.type,
    attempts: doc.attempts,
    state: webhookv1.DeliveryState[doc.state.toUpperCase() as Uppercase<DeliveryState>],
    nextAttemptAt: doc.nextAttemptAt ? BigInt(doc.nextAttemptAt.getTime()) : 0n,
    connectionId: doc.connectionId,
    createdAt: BigInt(doc.createdAt.getTime()),
    attemptLog: doc.attemptLog.map((a) => ({ ...a, startedAt: BigInt(a.startedAt.getTime()), error: a.error ?? "" })),
  };
}

export default (deps: WebhookDeps) => (router: Router) => {
  async function eventOrThrow(eventId: string, projection?: Record<string, 0>): Promise<WebhookEventDoc> {
    if (!EVENT_ID.test(eventId)) throw new RpcError("event_id must be an evt_ id", Status.INVALID_ARGUMENT);
    const doc = await deps.store.events.findOne({ _id: eventId }, projection ? { projection } : {});
    if (!doc) throw new RpcError(`no webhook event ${eventId}`, Status.NOT_FOUND);
    return doc;
  }

  async function requeueByOperator(event: WebhookEventDoc, action: "webhook.resend" | "webhook.recover") {
    const targets = [event._id, event.partnerId, event.connectionId];
    const doc = await requeue(deps.store, event, deps.trail.entry({ action, actor: "operator", targets }));
    deps.eventsAudit.afterWrite(doc._id);
    return doc;
  }

  router.service(webhookv1.WebhookService, {
    async listDeliveries(req) {
      if (!req.partnerId) throw new RpcError("partner_id is required", Status.INVALID_ARGUMENT);
      if (req.limit < 0 || req.limit > MAX_LIST)
        throw new RpcError(`limit must be 0 to ${MAX_LIST}`, Status.INVALID_ARGUMENT);
      const docs = await deps.store.events
        .find({ partnerId: req.partnerId }, { projection: { body: 0 } })
        .sort({ createdAt: -1, _id: -1 })
        .limit(req.limit || MAX_LIST)
        .toArray();
      const health = await deps.store.endpoints.findOne({ _id: req.partnerId });
      const endpoint = {
        failing: isFailing(health, Date.now(), failingAfterMs(deps.settings.WEBHOOK_RETRY_WINDOW_SECONDS)),
        failingSince: health?.failingSince ? BigInt(health.failingSince.getTime()) : 0n,
        lastSuccessAt: health?.lastSuccessAt ? BigInt(health.lastSuccessAt.getTime()) : 0n,
      };
      return { deliveries: docs.map(deliveryOf), endpoint };
    },

    // GET /v1/events. The gateway has checked the query (limit, type, the cursor's shape): each thing once.
    async listEvents(req) {
      const mode = modeFromProto(req.mode);
      if (!req.partnerId || !mode) throw new RpcError("partner_id and mode are required", Status.INVALID_ARGUMENT);
      const page: EventsPage = {
        partnerId: req.partnerId,
        mode,
        limit: req.limit,
        ...(req.type ? { type: req.type as WebhookEventType } : {}),
      };
      let after: EventKey | undefined;
      if (req.startingAfter) {
        const found = await deps.store.events.findOne(cursorFilter(page, req.startingAfter), {
          projection: { _id: 1, createdAt: 1, seq: 1 },
        });
        if (!found) throw serviceError(ErrorReason.INVALID_REQUEST, STARTING_AFTER_UNKNOWN, "starting_after");
        after = found;
      }
      const docs = await deps.store.events
        .find(pageFilter(page, after), { projection: { body: 1 } })
        .sort(EVENTS_ORDER)
        .limit(page.limit + 1)
        .toArray();
      return { events: docs.slice(0, page.limit).map((d) => d.body), hasMore: docs.length > page.limit };
    },

    async getDelivery(req) {
      const doc = await eventOrThrow(req.eventId, { body: 0 });
      return { delivery: deliveryOf(doc), partnerId: doc.partnerId };
    },

    resendEvent: (req) =>
      deps.trail.refusals({ action: "webhook.resend", actor: "operator", targets: [req.eventId] }, async () => {
        const doc = await requeueByOperator(await eventOrThrow(req.eventId), "webhook.resend");
        deps.poke();
        deps.logger.info({ eventId: doc._id, partnerId: doc.partnerId }, "webhook event resent by the operator");
        return { delivery: deliveryOf(doc) };
      }),

    // One record per re-queued event, each stored with its re-queue: a recover that finds nothing changes nothing.
    recoverDeliveries: (req) =>
      deps.trail.refusals({ action: "webhook.recover", actor: "operator", targets: [req.partnerId] }, async () => {
        if (!req.partnerId) throw new RpcError("partner_id is required", Status.INVALID_ARGUMENT);
        if (req.since <= 0n) throw new RpcError("since is required", Status.INVALID_ARGUMENT);
        const events = await deps.store.events.find({ partnerId: req.partnerId }).toArray();
        const due = recoverable(events, new Date(Number(req.since)));
        for (const doc of due) await requeueByOperator(doc, "webhook.recover");
        if (due.length > 0) deps.poke();
        deps.logger.info(
          { partnerId: req.partnerId, since: new Date(Number(req.since)), requeued: due.length },
          "failed webhook deliveries recovered by the operator",
        );
        return { eventIds: due.map((d) => d._id) };
      }),
  });
};
