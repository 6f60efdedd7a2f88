import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { webhookv1 } from "@pi/proto";
import type { Logger, Settings } from "@pi/common";
import type { DeliveryState, WebhookEventDoc, WebhookStore } from "./store.js";

export interface WebhookDeps {
  settings: Settings;
  logger: Logger;
  store: WebhookStore;
}

const MAX_LIST = 1000;

const stateEnum: Record<DeliveryState, webhookv1.DeliveryState> = {
  pending: webhookv1.DeliveryState.PENDING,
  delivered: webhookv1.DeliveryState.DELIVERED,
  failed: webhookv1.DeliveryState.FAILED,
  no_endpoint: webhookv1.DeliveryState.NO_ENDPOINT,
};

export function deliveryOf(doc: WebhookEventDoc) {
  return {
    eventId: doc._id,
    type: doc.type,
    attempts: doc.attempts,
    state: stateEnum[doc.state],
    nextAttemptAt: doc.nextAttemptAt ? BigInt(doc.nextAttemptAt.getTime()) : 0n,
    connectionId: doc.connectionId,
    createdAt: BigInt(doc.createdAt.getTime()),
    attemptLog: (doc.attemptLog ?? []).map((a) => ({
      number: a.number,
      startedAt: BigInt(a.startedAt.getTime()),
      statusCode: a.statusCode,
      durationMs: a.durationMs,
      error: a.error ?? "",
      responseExcerpt: a.responseExcerpt,
    })),
  };
}

export default (deps: WebhookDeps) => (router: ConnectRouter) => {
  router.service(webhookv1.WebhookService, {
    async listDeliveries(req) {
      if (!req.partnerId) throw new ConnectError("partner_id is required", Code.InvalidArgument);
      if (req.limit < 0 || req.limit > MAX_LIST) throw new ConnectError(`limit must be 0 to ${MAX_LIST}`, Code.InvalidArgument);
      const docs = await deps.store.events
        .find({ partnerId: req.partnerId }, { projection: { body: 0 } })
        .sort({ createdAt: -1, _id: -1 })
        .limit(req.limit || MAX_LIST)
        .toArray();
      return { deliveries: docs.map(deliveryOf) };
    },
  });
};
