import { randomUUID } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import { CONSUMER_MAX_WAIT_MS, topicName, type AuthClient, type Kafka, type Logger } from "@pi/common";
import type { RevocationList } from "./bearer.js";

const { PartnerEventKind } = eventsv1;

/** How often a gateway tells the auth service it is alive, even when no event arrived. */
export const HEARTBEAT_MS = 2_000;

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
 * Tells the auth service how far this gateway has applied the partner-events topic: at once when
 * it moves (one call in flight at a time, later moves coalesced) and as a heartbeat. The auth
 * service holds an operator's revocation until every live gateway has passed its event.
 */
export class PositionReporter {
  readonly instanceId = randomUUID();
  private readonly nextOffsets = new Map<number, bigint>();
  private inFlight?: Promise<void>;
  private again = false;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly auth: AuthClient,
    private readonly logger: Logger,
  ) {
    this.timer = setInterval(() => this.kick(), HEARTBEAT_MS);
    this.timer.unref();
  }

  advance(partition: number, nextOffset: bigint): void {
    this.nextOffsets.set(partition, nextOffset);
    this.kick();
  }

  /** Resolves once the report in flight (and any coalesced after it) has been sent. */
  async flush(): Promise<void> {
    while (this.inFlight) await this.inFlight;
  }

  kick(): void {
    if (this.inFlight) {
      this.again = true;
      return;
    }
    this.inFlight = this.auth
      .reportGatewayPosition({ instanceId: this.instanceId, nextOffsets: Object.fromEntries(this.nextOffsets) })
      .then(
        () => undefined,
        (err: unknown) => this.logger.warn({ err: (err as Error).message }, "reporting the revocation feed position failed"),
      )
      .finally(() => {
        this.inFlight = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.inFlight;
    await this.auth.reportGatewayPosition({ instanceId: this.instanceId, leaving: true }, { timeoutMs: 2000 }).catch(() => undefined);
  }
}

/**
 * Keeps a gateway's revocation list current. The end of the partner-events topic is read first,
 * then a snapshot of every revocation from the auth service (whose database write precedes each
 * event), then the topic is followed from that end: nothing is missed and nothing old is
 * replayed. Each instance reads with a group of its own (no committed offsets), so every instance
 * sees every event.
 */
export async function followRevocations(list: RevocationList, auth: AuthClient, kafka: Kafka, namespace: string, logger: Logger) {
  const topic = topicName(namespace, "partnerEvents");
  const admin = kafka.admin();
  await admin.connect();
  let ends: { partition: number; offset: string }[];
  try {
    ends = await admin.fetchTopicOffsets(topic);
  } finally {
    await admin.disconnect();
  }

  const snapshot = await auth.listRevocations({});
  snapshot.revokedClientIds.forEach((id) => list.revokeClient(id));
  snapshot.suspendedPartnerIds.forEach((id) => list.suspendPartner(id));

  const reporter = new PositionReporter(auth, logger);
  const consumer = kafka.consumer({ groupId: `${namespace}.gateway.${reporter.instanceId}`, maxWaitTimeInMs: CONSUMER_MAX_WAIT_MS });
  await consumer.connect();
  await consumer.subscribe({ topic });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      if (message.value) {
        try {
          applyPartnerEvent(list, fromBinary(eventsv1.PartnerEventSchema, message.value));
        } catch (err) {
          logger.error({ err }, "unreadable partner event skipped");
        }
      }
      reporter.advance(partition, BigInt(message.offset) + 1n);
    },
  });
  for (const { partition, offset } of ends) {
    consumer.seek({ topic, partition, offset });
    reporter.advance(partition, BigInt(offset));
  }
  // Known to the auth service before this gateway takes traffic, so revocations wait for it.
  await reporter.flush();
  return {
    instanceId: reporter.instanceId,
    async stop() {
      await consumer.disconnect();
      await reporter.stop();
    },
  };
}
