import { setTimeout as sleep } from "node:timers/promises";
import { create, toBinary } from "@bufbuild/protobuf";
import type { Collection } from "mongodb";
import { eventsv1 } from "@pi/proto";
import { Outbox, outboxEntry, type OutboxFields, type Published } from "@pi/common/store/persistence";
import type { Logger } from "@pi/common/runtime/logger";
import { FOLLOWER_LIVENESS_MS, type NextOffsets } from "@pi/common/events/partner-event-feed";
import { topicOffsets, type Kafka, type Producer } from "@pi/common/events/kafka";
import type { AuditTrail } from "@pi/common/store/audit";
import type { AuthStore, FollowerDoc, FollowerKind, PartnerEventEntry } from "./store.js";

// An operator's change is visible when its command exits (operator contract): its partner event is published at once
// and the answer waits until every live follower applied it, or a timeout well under the command's 2 s budget.

const TIMEOUT_MS = 1_200;
const POLL_MS = 10;
const RELAY_RETRY_MS = 50;

/** The live followers that have not applied every one of `events` (where each went on the topic). */
export function followersBehind(followers: readonly FollowerDoc[], events: readonly Published[], now: number) {
  return followers.filter(
    (f) =>
      f.seenAt.getTime() >= now - FOLLOWER_LIVENESS_MS &&
      events.some((e) => (f.nextOffsets[String(e.partition)] ?? -1) <= Number(e.offset)),
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

export class PartnerEventPublisher {
  readonly partners;
  readonly credentials;
  readonly revokedKeys;
  /** The audit outboxes of the same documents (the trail starts them): every change here records itself. */
  readonly audit;

  constructor(
    private readonly store: AuthStore,
    trail: AuditTrail,
    private readonly producer: Pick<Producer, "send">,
    private readonly kafka: Pick<Kafka, "withAdmin">,
    private readonly topic: string,
    private readonly logger: Logger,
  ) {
    this.partners = this.outbox(store.partners, (p) => p._id);
    this.credentials = this.outbox(store.credentials, (c) => c.partnerId);
    this.revokedKeys = this.outbox(store.revokedKeys, (k) => k._id);
    this.audit = {
      partners: trail.on(store.partners),
      credentials: trail.on(store.credentials),
      revokedKeys: trail.on(store.revokedKeys),
    };
  }

  private outbox<D extends PartnerEventDoc>(collection: Collection<D>, partnerOf: (doc: D) => string) {
    return new Outbox<D, PartnerEventEntry>({
      name: "partner events",
      collection,
      producer: this.producer,
      topic: this.topic,
      logger: this.logger,
      // Every event of a partner on one partition, in order, whichever document carried it.
      key: (doc) => partnerOf(doc as D),
      value: (_doc, e) =>
        toBinary(
          eventsv1.PartnerEventSchema,
          create(eventsv1.PartnerEventSchema, {
            ...e,
            occurredAt: BigInt(e.occurredAt.getTime()),
            suspendedAt: BigInt(e.suspendedAt ?? 0),
          }),
        ),
    });
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

  /** Relays a change's audit record and partner event, waits for every live follower to apply the event, and logs it. */
  async propagate(
    on: "partners" | "credentials" | "revokedKeys",
    id: string,
    entry: PartnerEventEntry,
    log: { what: string; fields: Record<string, string> },
  ) {
    const since = performance.now();
    this.audit[on].afterWrite(id);
    const outbox = this[on];
    const deadline = since + TIMEOUT_MS;
    // Not published by this call's relay: tried again until the deadline, or the sweep took it.
    let at = (await outbox.relay(id)).get(entry.eventId);
    while (!at && performance.now() < deadline && (await outbox.holds(id, entry.eventId))) {
      await sleep(RELAY_RETRY_MS);
      at = (await outbox.relay(id)).get(entry.eventId);
    }
    // Published by another relay (another change of the same document at once, or the sweep): it lies
    // before the topic's end, which every follower must then pass. Still held at the deadline: unknown.
    const publishedElsewhere = !at && !(await outbox.holds(id, entry.eventId));
    const ends = publishedElsewhere
      ? await this.kafka.withAdmin((admin) => topicOffsets(admin, this.topic)).catch(() => [])
      : [];
    const events = at
      ? [at]
      : ends
          .map((end) => ({ partition: end.partition, offset: BigInt(end.offset) - 1n }))
          .filter((e) => e.offset >= 0n);
    let live: FollowerDoc[];
    let behind: FollowerDoc[];
    for (;;) {
      const now = Date.now();
      live = await this.store.followers.find({ seenAt: { $gte: new Date(now - FOLLOWER_LIVENESS_MS) } }).toArray();
      behind = events.length === 0 ? live : followersBehind(live, events, now);
      if (behind.length === 0 || events.length === 0 || performance.now() >= deadline) break;
      await sleep(POLL_MS);
    }
    const count = (docs: FollowerDoc[], kind: FollowerKind) =>
      docs.filter((f) => (f.kind ?? "gateway") === kind).length;
    const [gateways, authReplicas] = [count(live, "gateway"), count(live, "auth")];
    const [confirmed, authConfirmed] = [gateways - count(behind, "gateway"), authReplicas - count(behind, "auth")];
    const elapsedMs = Math.round(performance.now() - since);
    const fields = { ...log.fields, gateways, confirmed, authReplicas, authConfirmed, propagationMs: elapsedMs };
    if (confirmed < gateways || authConfirmed < authReplicas)
      this.logger.warn(fields, `${log.what}; not every gateway and auth replica confirmed it in time`);
    else this.logger.info(fields, log.what);
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
