import { eventsv1 } from "@pi/proto";
import { followPartnerEvents } from "@pi/common/events/partner-event-feed";
import type { AuthClient } from "@pi/common/rpc/clients";
import type { Kafka } from "@pi/common/events/kafka";
import type { Logger } from "@pi/common/runtime/logger";
import type { RevocationList } from "./bearer.js";

const { PartnerEventKind } = eventsv1;

export function applyPartnerEvent(list: RevocationList, event: eventsv1.PartnerEvent): void {
  switch (event.kind) {
    case PartnerEventKind.CREDENTIAL_REVOKED:
      list.revokeClient(event.clientId);
      break;
    case PartnerEventKind.PARTNER_SUSPENDED:
      list.suspendPartner(event.partnerId, Number(event.suspendedAt));
      break;
    case PartnerEventKind.PARTNER_REINSTATED:
      list.reinstatePartner(event.partnerId, Number(event.suspendedAt));
      break;
    case PartnerEventKind.SIGNING_KEY_REVOKED:
      list.revokeKey(event.kid);
      break;
    default:
      break;
  }
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
      for (const id of snapshot.suspendedPartnerIds) list.suspendPartner(id, 0);
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
