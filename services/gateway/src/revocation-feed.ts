import { randomUUID } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import { topicName, type AuthClient, type Kafka, type Logger } from "@pi/common";
import type { RevocationList } from "./bearer.js";

const { PartnerEventKind } = eventsv1;

export function applyPartnerEvent(list: RevocationList, event: eventsv1.PartnerEvent): void {
  switch (event.kind) {
    case PartnerEventKind.CREDENTIAL_REVOKED:
      list.revokeClient(event.clientId);
      break;
    case PartnerEventKind.PARTNER_SUSPENDED:
      list.suspendPartner(event.partnerId);
      break;
    case PartnerEventKind.PARTNER_REINSTATED:
      list.reinstatePartner(event.partnerId);
      break;
    default:
      break;
  }
}

/**
 * Keeps a gateway's revocation list current: a snapshot from the auth service for what is older
 * than the topic's retention, then every partner event replayed in order from the beginning and
 * followed live. Each gateway instance reads with a group of its own, so every instance sees
 * every event.
 */
export async function followRevocations(list: RevocationList, auth: AuthClient, kafka: Kafka, namespace: string, logger: Logger) {
  const snapshot = await auth.listRevocations({});
  snapshot.revokedClientIds.forEach((id) => list.revokeClient(id));
  snapshot.suspendedPartnerIds.forEach((id) => list.suspendPartner(id));
  const consumer = kafka.consumer({ groupId: `${namespace}.gateway.${randomUUID()}`, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic: topicName(namespace, "partnerEvents"), fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      if (!message.value) return;
      try {
        applyPartnerEvent(list, fromBinary(eventsv1.PartnerEventSchema, message.value));
      } catch (err) {
        logger.error({ err }, "unreadable partner event skipped");
      }
    },
  });
  return { stop: () => consumer.disconnect() };
}
