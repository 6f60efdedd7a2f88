import { setTimeout as sleep } from "node:timers/promises";
import { create, toBinary } from "@bufbuild/protobuf";
import type { Collection } from "mongodb";
import { eventsv1 } from "@pi/proto";
import { Outbox, outboxEntry, type OutboxFields } from "@pi/common/store/persistence";
import type { Logger } from "@pi/common/runtime/logger";
import { FOLLOWER_LIVENESS_MS, type NextOffsets } from "@pi/common/events/partner-event-feed";
import type { Producer } from "@pi/common/events/kafka";
import type { AuthStore, FollowerDoc, FollowerKind, PartnerEventEntry } from "./store.js";

// An operator's change is visible when its command exits (operator contract): its partner event is published at once
// and the answer waits until every live follower applied it, or a timeout well under the command's 2 s budget.

const DEFAULT_TIMEOUT_MS = 1_200;
const POLL_MS = 10;
const RELAY_RETRY_MS = 50;

export interface Propagation {
  gateways: number;
  confirmed: number;
  authReplicas: number;
  authConfirmed: number;
  elapsedMs: bigint;
}

export function followersBehind(
  followers: readonly FollowerDoc[],
  partition: number,
  offset: number,
  now: number,
): FollowerDoc[] {
  return followers.filter(
    (f) => f.seenAt.getTime() >= now - FOLLOWER_LIVENESS_MS && (f.nextOffsets[String(partition)] ?? -1) <= offset,
  );
}

export function partnerEvent(
  kind: eventsv1.PartnerEventKind,
  partnerId: string,
  clientId = "",
  extra: Pick<PartnerEventEntry, "suspendedAt" | "kid"> = {},
  at = new Date(),
): PartnerEventEntry {
  return outboxEntry({ kind, partnerId, clientId, ...extra }, at);
}

type PartnerEventDoc = { _id: string } & OutboxFields<PartnerEventEntry>;

function partnerEventOutbox<D extends PartnerEventDoc>(
  collection: Collection<D>,
  partnerOf: (doc: D) => string,
  producer: Pick<Producer, "send">,
  topic: string,
  logger: Logger,
) {
  return new Outbox<D, PartnerEventEntry>({
    name: "partner events",
    collection,
    producer,
    topic,
    logger,
    // Every event of a partner on one partition, in order, whichever document carried it.
    key: (doc) => partnerOf(doc as D),
    value: (_doc, e) =>
      toBinary(
        eventsv1.PartnerEventSchema,
        create(eventsv1.PartnerEventSchema, {
          kind: e.kind,
          partnerId: e.partnerId,
          clientId: e.clientId,
          occurredAt: BigInt(e.occurredAt.getTime()),
          suspendedAt: BigInt(e.suspendedAt ?? 0),
          kid: e.kid ?? "",
        }),
      ),
  });
}

export class PartnerEventPublisher {
  readonly partners;
  readonly credentials;
  readonly revokedKeys;

  constructor(
    private readonly store: AuthStore,
    producer: Pick<Producer, "send">,
    topic: string,
    private readonly logger: Logger,
    private readonly timeoutMs = DEFAULT_TIMEOUT_MS,
  ) {
    this.partners = partnerEventOutbox(store.partners, (p) => p._id, producer, topic, logger);
    this.credentials = partnerEventOutbox(store.credentials, (c) => c.partnerId, producer, topic, logger);
    this.revokedKeys = partnerEventOutbox(store.revokedKeys, (k) => k._id, producer, topic, logger);
  }

  private get outboxes() {
    return [this.partners, this.credentials, this.revokedKeys] as const;
  }

  async start(): Promise<void> {
    await Promise.all(this.outboxes.map((o) => o.ensureIndex()));
    for (const o of this.outboxes) o.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.outboxes.map((o) => o.stop()));
  }

  async propagate<D extends PartnerEventDoc>(
    outbox: Outbox<D, PartnerEventEntry>,
    id: string,
    entry: PartnerEventEntry,
    since = performance.now(),
    log?: { what: string; fields: Record<string, string> },
  ): Promise<Propagation> {
    const deadline = performance.now() + this.timeoutMs;
    // Not published by this call's relay: tried again until the deadline, or the sweep took it.
    let at = (await outbox.relay(id)).get(entry.eventId);
    while (!at && performance.now() < deadline && (await outbox.holds(id, entry.eventId))) {
      await sleep(RELAY_RETRY_MS);
      at = (await outbox.relay(id)).get(entry.eventId);
    }
    const [partition, offset] = [at?.partition, Number(at?.offset ?? 0)];
    let live: FollowerDoc[];
    let behind: FollowerDoc[];
    for (;;) {
      const now = Date.now();
      live = await this.store.followers.find({ seenAt: { $gte: new Date(now - FOLLOWER_LIVENESS_MS) } }).toArray();
      behind = partition === undefined ? live : followersBehind(live, partition, offset, now);
      if (behind.length === 0 || partition === undefined || performance.now() >= deadline) break;
      await sleep(POLL_MS);
    }
    const count = (docs: FollowerDoc[], kind: FollowerKind) =>
      docs.filter((f) => (f.kind ?? "gateway") === kind).length;
    const [gateways, authReplicas] = [count(live, "gateway"), count(live, "auth")];
    const [confirmed, authConfirmed] = [gateways - count(behind, "gateway"), authReplicas - count(behind, "auth")];
    const elapsedMs = Math.round(performance.now() - since);
    if (log) {
      const fields = { ...log.fields, gateways, confirmed, authReplicas, authConfirmed, propagationMs: elapsedMs };
      if (confirmed < gateways || authConfirmed < authReplicas)
        this.logger.warn(fields, `${log.what}; not every gateway and auth replica confirmed it in time`);
      else this.logger.info(fields, log.what);
    }
    return { gateways, confirmed, authReplicas, authConfirmed, elapsedMs: BigInt(elapsedMs) };
  }

  /** A follower's report: alive, and applied everything before these offsets; or (leaving) gone. */
  async report(instanceId: string, kind: FollowerKind, nextOffsets: NextOffsets, leaving: boolean): Promise<void> {
    if (leaving) {
      await this.store.followers.deleteOne({ _id: instanceId });
      return;
    }
    const offsets = Object.fromEntries(Object.entries(nextOffsets).map(([p, o]) => [p, Number(o)]));
    await this.store.followers.updateOne(
      { _id: instanceId },
      { $set: { kind, nextOffsets: offsets, seenAt: new Date() } },
      { upsert: true },
    );
  }
}
