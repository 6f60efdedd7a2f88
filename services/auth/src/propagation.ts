import { create, toBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import type { Producer } from "@pi/common";
import type { AuthStore, GatewayDoc } from "./store.js";

// An operator's revocation, suspension or reinstatement must be visible to the partner API by the
// time the operator command exits (operator contract). Gateways verify bearers locally, so the
// change reaches them as a partner event on Kafka; each gateway reports how far it has applied
// that topic (ReportGatewayPosition, at once after applying and as a heartbeat), and the auth
// service answers the operator only when every live gateway has applied the event, or after a
// timeout that keeps the command well under its 2 s budget.

/** A gateway that has not reported for this long is taken for dead and not waited for. */
export const GATEWAY_LIVENESS_MS = 10_000;
/** How often a gateway reports even when nothing changed. */
export const GATEWAY_HEARTBEAT_MS = 2_000;
const DEFAULT_TIMEOUT_MS = 1_200;
const POLL_MS = 10;

export interface Propagation {
  gateways: number;
  confirmed: number;
  elapsedMs: bigint;
}

/** The live gateways that have not yet applied the event at (partition, offset). */
export function gatewaysBehind(gateways: readonly GatewayDoc[], partition: number, offset: number, now: number): GatewayDoc[] {
  return gateways.filter((g) => g.seenAt.getTime() >= now - GATEWAY_LIVENESS_MS && (g.nextOffsets[String(partition)] ?? -1) <= offset);
}

export class PartnerEventPublisher {
  constructor(
    private readonly store: AuthStore,
    private readonly producer: Producer,
    private readonly topic: string,
    private readonly timeoutMs = DEFAULT_TIMEOUT_MS,
  ) {}

  /**
   * Publishes the event (acknowledged by Kafka before this continues), then waits for every live
   * gateway to apply it. `since` is when the change was written, for the reported elapsed time.
   */
  async publish(
    kind: eventsv1.PartnerEventKind,
    partnerId: string,
    clientId = "",
    since = performance.now(),
  ): Promise<Propagation> {
    const { partition, offset } = await this.announce(kind, partnerId, clientId);
    const deadline = performance.now() + this.timeoutMs;
    for (;;) {
      const now = Date.now();
      const live = await this.store.gateways.find({ seenAt: { $gte: new Date(now - GATEWAY_LIVENESS_MS) } }).toArray();
      const behind = gatewaysBehind(live, partition, offset, now).length;
      if (behind === 0 || performance.now() >= deadline) {
        return { gateways: live.length, confirmed: live.length - behind, elapsedMs: BigInt(Math.round(performance.now() - since)) };
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /**
   * Publishes the event (acknowledged by Kafka) without waiting for the gateways: for changes that
   * only other services follow (a webhook signing secret), not the gateways' revocation list.
   */
  async announce(kind: eventsv1.PartnerEventKind, partnerId: string, clientId = ""): Promise<{ partition: number; offset: number }> {
    const event = create(eventsv1.PartnerEventSchema, { kind, partnerId, clientId, occurredAt: BigInt(Date.now()) });
    const [meta] = await this.producer.send({
      topic: this.topic,
      messages: [{ key: partnerId, value: Buffer.from(toBinary(eventsv1.PartnerEventSchema, event)) }],
    });
    return { partition: meta!.partition, offset: Number(meta!.baseOffset) };
  }

  /** A gateway's report: alive, and applied everything before these offsets. */
  async report(instanceId: string, nextOffsets: Record<string, number>, leaving: boolean): Promise<void> {
    if (leaving) {
      await this.store.gateways.deleteOne({ _id: instanceId });
      return;
    }
    await this.store.gateways.updateOne({ _id: instanceId }, { $set: { nextOffsets, seenAt: new Date() } }, { upsert: true });
  }
}
