import { eventsv1 } from "@pi/proto";
import { followPartnerEvents } from "@pi/common/events/partner-event-feed";
import type { AuthClient } from "@pi/common/rpc/clients";
import type { Kafka } from "@pi/common/events/kafka";
import type { Logger } from "@pi/common/runtime/logger";
import type { RevocationList } from "./bearer.js";

const { PartnerEventKind } = eventsv1;

const appliers: Partial<Record<eventsv1.PartnerEventKind, (list: RevocationList, e: eventsv1.PartnerEvent) => void>> = {
  [PartnerEventKind.CREDENTIAL_REVOKED]: (list, e) => list.revokeClient(e.clientId),
  [PartnerEventKind.PARTNER_SUSPENDED]: (list, e) => list.setSuspended(e.partnerId, true, Number(e.suspendedAt)),
  [PartnerEventKind.PARTNER_REINSTATED]: (list, e) => list.setSuspended(e.partnerId, false, Number(e.suspendedAt)),
  [PartnerEventKind.SIGNING_KEY_REVOKED]: (list, e) => list.revokeKey(e.kid),
};

/** Applies the events that revoke tokens; the others are not the gateway's. */
export function applyPartnerEvent(list: RevocationList, event: eventsv1.PartnerEvent): void {
  appliers[event.kind]?.(list, event);
}

/** Keeps a gateway's revocation list current: a snapshot from the auth service, then the partner-event feed. */
export async function followRevocations(
  list: RevocationList,
  auth: AuthClient,
  kafka: Kafka,
  namespace: string,
  logger: Logger,
) {
  return followPartnerEvents({
    kafka,
    namespace,
    service: "gateway",
    logger,
    apply: (event) => applyPartnerEvent(list, event),
    async catchUp() {
      const snapshot = await auth.listRevocations({});
      for (const id of snapshot.revokedClientIds) list.revokeClient(id);
      for (const id of snapshot.suspendedPartnerIds) list.setSuspended(id, true, 0);
      for (const c of snapshot.tokenCutoffs) list.noteSuspension(c.partnerId, Number(c.suspendedAt));
      for (const kid of snapshot.revokedKids) list.revokeKey(kid);
    },
    sendPosition: (instanceId) => async (nextOffsets, leaving) => {
      await auth.reportGatewayPosition(
        { instanceId, nextOffsets: leaving ? {} : nextOffsets, leaving },
        leaving ? { timeoutMs: 2000 } : undefined,
      );
    },
  });
}
