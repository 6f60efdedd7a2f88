import type { Filter } from "mongodb";
import { contextFromHeaders, inSpan, SpanKind } from "@pi/common/telemetry";
import { insertNew } from "@pi/common/persistence";
import { takeLease, type LeaseFields } from "@pi/common/background/lease";
import { webhookAttemptDuration, webhookDeliveries } from "@pi/common/metrics";
import type { Logger } from "@pi/common/logger";
import type { WebhookSender } from "./outbound.js";
import { afterAttempt as healthAfterAttempt, failingAfterMs } from "./endpoint-health.js";
import * as delivery from "./delivery-states.js";
import type { RetryPolicy } from "./schedule.js";
import { signatureHeader } from "./signature.js";
import type { AttemptRecord, QueueDoc, WebhookEventDoc, WebhookStore } from "./store.js";
import { signingSecrets, type TargetCache, type WebhookTarget } from "./targets.js";

// Runs the schedule that lives in the database. To claim a due queue entry, a replica inserts a
// claim document whose _id names the entry's current slot (event id, attempts made, due time) and
// which expires after a lease: of all the replicas that read the same slot, exactly one insert
// succeeds. The holder makes the attempt and then moves the entry to its next slot (or removes
// it), so every attempt has a slot of its own. The lease outlasts the attempt timeout, so no two
// replicas send the same attempt at once; if the holder dies, the slot's claim may be taken over
// once its lease is over (a conditional update on the claim's expiry, which one replica wins), and
// the attempt is made again. Outcomes are written only while the event is still where the entry
// says (pending, same attempts): a conditional update, so a late holder never overwrites.
//
// A slow or dead endpoint holds at most `maxPerPartner` of this replica's `maxInFlight` slots
// (each for at most the attempt timeout), and claims skip partners at their limit, so other
// partners' events keep going out.
//
// When idle the dispatcher sleeps until the earliest entry it could take comes due, at most
// `idleMs` (5 s). New work wakes it at once: the replica that stores an event (its Kafka consumer),
// re-queues one (resend, recover) or ends an attempt pokes its own dispatcher, and that replica
// takes the entry unless it is at its limits. Another replica's entries (its limits reached, or it
// died) are therefore seen within `idleMs`, a dead holder's slot within its lease plus `idleMs`.
// Each look is one query of the queue: the due entries and, after them, the next due time.

export interface DispatcherOptions {
  store: WebhookStore;
  targets: TargetCache;
  sender: WebhookSender;
  policy: RetryPolicy;
  logger: Logger;
  maxInFlight?: number;
  maxPerPartner?: number;
  /**
   * Longest sleep between two looks at the schedule when nothing is known to come due: how long
   * an entry another replica stored and did not take may wait to be seen by this one.
   */
  idleMs?: number;
}

/** When the auth service cannot say where to send, the event waits this long; no attempt is counted. */
const TARGET_UNAVAILABLE_RETRY_MS = 5_000;
/** A slot's claim, as a lease (until its `expiresAt`); the holder's token only matters to a takeover. */
const SLOT_LEASE: LeaseFields = { until: "expiresAt", holder: "holder" };
const CLAIM_SWEEP_EVERY_MS = 10 * 60_000;
export const TARGET_LOOKUP_TIMEOUT_MS = 3_000;
const LEASE_MARGIN_MS = 5_000;
/** The pause after finding due entries that only other replicas' running attempts hold. */
const CONTENDED_WAIT_MS = 200;
const CLAIM_KEEP_MS = 60 * 60_000;
export const DISPATCHER_IDLE_MS = 5_000;
/** Queue entries read per look at the schedule. */
const BATCH = 32;

export class Dispatcher {
  private readonly maxInFlight: number;
  private readonly maxPerPartner: number;
  private readonly idleMs: number;
  private readonly leaseMs: number;
  private readonly timeoutMs: number;
  private readonly perPartner = new Map<string, number>();
  private readonly active = new Set<Promise<void>>();
  /** Ids of the events this replica is attempting. */
  private readonly attempting = new Set<string>();
  private running = false;
  private stopping = false;
  private poked = false;
  private wake: (() => void) | null = null;
  private loopDone: Promise<void> = Promise.resolve();
  private lastSweep = 0;

  constructor(private readonly o: DispatcherOptions) {
    this.maxInFlight = o.maxInFlight ?? 128;
    this.maxPerPartner = o.maxPerPartner ?? 8;
    this.idleMs = o.idleMs ?? DISPATCHER_IDLE_MS;
    this.timeoutMs = o.policy.attemptTimeoutSeconds * 1000;
    // Room for the target lookup (its own deadline), the attempt and storing the outcome.
    this.leaseMs = this.timeoutMs + TARGET_LOOKUP_TIMEOUT_MS + 2 * LEASE_MARGIN_MS;
  }

  start(): void {
    this.running = true;
    this.loopDone = this.loop();
  }

  /** Look at the schedule now (a new event was stored, or a slot came free). */
  poke(): void {
    this.poked = true;
    this.wake?.();
  }

  /**
   * Stops claiming, gives running attempts up to `graceMs` to finish, then cuts them off. An
   * attempt cut off this way is not counted: its event is due again at once for whoever runs next.
   */
  async stop(graceMs = 3_000, cutOff: () => Promise<void> = async () => {}): Promise<void> {
    this.running = false;
    this.poke();
    await this.loopDone;
    const settled = Promise.allSettled([...this.active]);
    const timer = new Promise<"late">((resolve) => setTimeout(() => resolve("late"), graceMs).unref());
    if ((await Promise.race([settled, timer])) === "late") {
      this.stopping = true;
      await cutOff();
      await settled;
    }
  }

  private async loop(): Promise<void> {
    while (this.running) {
      try {
        this.poked = false;
        await this.sweepClaims();
        const waitMs = await this.fillSlots();
        if (!this.running) break;
        await this.sleep(waitMs);
      } catch (err) {
        this.o.logger.error({ err }, "webhook schedule unreadable; retrying");
        await this.sleep(this.idleMs);
      }
    }
  }

  private saturatedPartners(): string[] {
    return [...this.perPartner].filter(([, n]) => n >= this.maxPerPartner).map(([p]) => p);
  }

  /** Entries this replica may start now (or, without `now`, at all): not its own running ones, not for partners at their limit. */
  private dueFilter(now?: Date): Filter<QueueDoc> {
    const saturated = this.saturatedPartners();
    return {
      ...(now ? { dueAt: { $lte: now } } : {}),
      ...(saturated.length > 0 ? { partnerId: { $nin: saturated } } : {}),
      ...(this.attempting.size > 0 ? { _id: { $nin: [...this.attempting] } } : {}),
    };
  }

  /**
   * Claims and starts due attempts; returns how long to sleep before looking again: until the next
   * entry comes due (at most `idleMs`), or briefly when due entries were left because other
   * replicas hold them.
   */
  private async fillSlots(): Promise<number> {
    for (;;) {
      if (!this.running) return 0;
      // A slot that comes free pokes the loop.
      if (this.active.size >= this.maxInFlight) return this.idleMs;
      const now = new Date();
      const limit = Math.min(this.maxInFlight - this.active.size, BATCH);
      // Sorted by due time: the due entries first, then (if the batch has room) the next one to come due.
      const batch = await this.o.store.queue.find(this.dueFilter()).sort({ dueAt: 1 }).limit(limit).toArray();
      const due = batch.filter((e) => e.dueAt.getTime() <= now.getTime());
      // Within this replica's limits, counting what this batch would add.
      const taking = new Map<string, number>();
      const wanted = due.filter((e) => {
        const n = (this.perPartner.get(e.partnerId) ?? 0) + (taking.get(e.partnerId) ?? 0);
        if (n >= this.maxPerPartner) return false;
        taking.set(e.partnerId, (taking.get(e.partnerId) ?? 0) + 1);
        return true;
      });
      const won = await this.claim(wanted, now);
      const leaseEnd = now.getTime() + this.leaseMs;
      for (const entry of won) this.launch(entry, leaseEnd);
      // A full batch of due entries: there may be more.
      if (won.length > 0 && due.length === batch.length && batch.length === limit) continue;
      if (won.length < wanted.length) return CONTENDED_WAIT_MS;
      const next = batch.find((e) => e.dueAt.getTime() > now.getTime());
      return next ? Math.min(Math.max(next.dueAt.getTime() - Date.now(), 5), this.idleMs) : this.idleMs;
    }
  }

  private slotKey(entry: QueueDoc): string {
    return `${entry._id}:${entry.attempts}:${entry.dueAt.getTime()}`;
  }

  /** The entries whose current slot this replica now holds; the others belong to other replicas. */
  private async claim(entries: QueueDoc[], now: Date): Promise<QueueDoc[]> {
    if (entries.length === 0) return [];
    const { claims } = this.o.store;
    const expiresAt = new Date(now.getTime() + this.leaseMs);
    const taken = new Set(
      (
        await insertNew(
          claims,
          entries.map((e) => ({ _id: this.slotKey(e), eventId: e._id, expiresAt })),
        )
      ).map((c) => c._id),
    );
    const won = entries.filter((e) => !taken.has(this.slotKey(e)));
    for (const entry of entries) {
      // A claim can only have run out if its slot came due more than a lease ago: then its holder
      // died before moving the entry on, and the slot may be taken over, once.
      if (
        taken.has(this.slotKey(entry)) &&
        entry.dueAt.getTime() + this.leaseMs < now.getTime() &&
        (await this.takeOver(this.slotKey(entry)))
      ) {
        won.push(entry);
      }
    }
    return won;
  }

  /** A slot's claim whose lease ran out is taken over as a lease: of replicas trying at once, one wins. */
  private async takeOver(key: string): Promise<boolean> {
    return (await takeLease(this.o.store.claims, { _id: key }, SLOT_LEASE, { ms: this.leaseMs })) !== null;
  }

  /** Claims are kept long after their lease (a late reader of an old slot must still lose), then dropped. */
  private async sweepClaims(): Promise<void> {
    if (Date.now() - this.lastSweep < CLAIM_SWEEP_EVERY_MS) return;
    this.lastSweep = Date.now();
    const { deletedCount } = await this.o.store.claims.deleteMany({
      expiresAt: { $lt: new Date(Date.now() - CLAIM_KEEP_MS) },
    });
    if (deletedCount > 0) this.o.logger.debug({ deletedCount }, "old webhook claims swept");
  }

  private sleep(ms: number): Promise<void> {
    if (this.poked || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  private launch(entry: QueueDoc, leaseEnd: number): void {
    this.attempting.add(entry._id);
    this.perPartner.set(entry.partnerId, (this.perPartner.get(entry.partnerId) ?? 0) + 1);
    const run: Promise<void> = this.attempt(entry, leaseEnd)
      .catch((err) => this.o.logger.error({ err, eventId: entry._id }, "webhook attempt could not be recorded"))
      .finally(() => {
        const left = (this.perPartner.get(entry.partnerId) ?? 1) - 1;
        if (left > 0) this.perPartner.set(entry.partnerId, left);
        else this.perPartner.delete(entry.partnerId);
        this.active.delete(run);
        this.attempting.delete(entry._id);
        this.poke();
      });
    this.active.add(run);
  }

  /** Gives the slot back without counting an attempt. */
  private async release(eventId: string, dueAt: Date): Promise<void> {
    await this.o.store.queue.updateOne({ _id: eventId }, { $set: { dueAt } });
  }

  /** The event as long as it is still where the queue entry says: pending, with the same attempts. */
  private current(entry: QueueDoc): Filter<WebhookEventDoc> {
    return { _id: entry._id, state: "pending", attempts: entry.attempts };
  }

  /** After an outcome could not be stored because the event moved on: make the entry match the event. */
  private async resync(eventId: string): Promise<void> {
    const { events, queue } = this.o.store;
    const event = await events.findOne({ _id: eventId });
    if (event && delivery.queued(event.state))
      await queue.updateOne(
        { _id: eventId },
        { $set: { dueAt: event.nextAttemptAt ?? new Date(), attempts: event.attempts } },
      );
    else await queue.deleteOne({ _id: eventId });
  }

  private async attempt(entry: QueueDoc, leaseEnd: number): Promise<void> {
    const { store, targets, sender, policy, logger } = this.o;
    const log = { eventId: entry._id, partnerId: entry.partnerId };
    let target: WebhookTarget | null;
    try {
      target = await targets.get(entry.partnerId);
    } catch (err) {
      logger.warn({ ...log, err }, "webhook target unavailable; event waits");
      await this.release(entry._id, new Date(Date.now() + TARGET_UNAVAILABLE_RETRY_MS));
      return;
    }
    const kept = target ? null : delivery.noEndpoint(entry.attempts);
    if (kept) {
      const res = await store.events.updateOne(this.current(entry), { $set: kept });
      if (res.modifiedCount === 0) return this.resync(entry._id);
      await store.queue.deleteOne({ _id: entry._id });
      logger.info(log, "partner has no webhook address; event kept, not sent");
      return;
    }

    if (Date.now() + this.timeoutMs + LEASE_MARGIN_MS > leaseEnd) {
      // The lookup took so long that the attempt might outlive the claim: give the slot back.
      await this.release(entry._id, new Date());
      return;
    }
    const startedAt = new Date();
    const outcome = target
      ? await inSpan(
          "webhook delivery",
          {
            kind: SpanKind.CLIENT,
            parent: contextFromHeaders(entry.trace),
            attributes: { "webhook.event_id": entry._id, "webhook.attempt": entry.attempts + 1 },
          },
          async (span) => {
            const result = await sender.post(target.url, entry.body, {
              "service-signature": signatureHeader(
                signingSecrets(target, startedAt.getTime()),
                Math.floor(startedAt.getTime() / 1000),
                entry.body,
              ),
            });
            span.setAttribute("http.response.status_code", result.statusCode);
            return result;
          },
        )
      : {
          delivered: false,
          statusCode: 0,
          durationMs: 0,
          error: "partner has no webhook address any more",
          responseExcerpt: "",
        };
    const number = entry.attempts + 1;
    const step = delivery.afterAttempt(
      {
        delivered: outcome.delivered,
        statusCode: outcome.statusCode,
        retryAfter: outcome.retryAfter,
        windowStart: entry.createdAt,
        attemptsMade: number,
        endedAt: new Date(),
        cutOff: this.stopping,
      },
      policy,
    );
    if (!step.counted) {
      await this.release(entry._id, step.dueAt);
      return;
    }
    const record: AttemptRecord = {
      number,
      startedAt,
      statusCode: outcome.statusCode,
      durationMs: outcome.durationMs,
      responseExcerpt: outcome.responseExcerpt,
      ...(outcome.error ? { error: outcome.error } : {}),
    };
    const next: delivery.DeliveryStep = {
      state: step.state,
      nextAttemptAt: step.nextAttemptAt,
      ...(step.deliveredAt ? { deliveredAt: step.deliveredAt } : {}),
    };
    const fields = {
      ...log,
      attempt: number,
      statusCode: outcome.statusCode,
      durationMs: outcome.durationMs,
      error: outcome.error,
      state: next.state,
    };
    const res = await store.events.updateOne(this.current(entry), {
      $set: next,
      $inc: { attempts: 1 },
      $push: { attemptLog: record },
    });
    if (res.modifiedCount === 0) {
      // A queue entry left behind by a crash, or a lease outlived: the event had moved on.
      logger.warn(fields, "webhook attempt made for an event that had moved on; outcome not recorded");
      return this.resync(entry._id);
    }
    webhookDeliveries.inc({ outcome: step.outcome });
    if (target) webhookAttemptDuration.observe(outcome.durationMs / 1000);
    // The endpoint's health is kept beside the queue's update, not after it: the slot frees no later.
    await Promise.all([
      next.nextAttemptAt
        ? store.queue.updateOne({ _id: entry._id }, { $set: { dueAt: next.nextAttemptAt, attempts: number } })
        : store.queue.deleteOne({ _id: entry._id }),
      target ? this.recordHealth(entry.partnerId, outcome.delivered, startedAt) : undefined,
    ]);
    if (outcome.delivered) logger.info(fields, "webhook delivered");
    else logger.info({ ...fields, nextAttemptAt: next.nextAttemptAt }, "webhook attempt failed");
  }

  /**
   * The partner's endpoint health after an attempt. Concurrent attempts of one partner may race
   * here; the worst that does is a streak that starts one attempt late.
   */
  private async recordHealth(partnerId: string, delivered: boolean, at: Date): Promise<void> {
    const { endpoints } = this.o.store;
    const prev = await endpoints.findOne({ _id: partnerId });
    const { next, transition } = healthAfterAttempt(
      prev,
      partnerId,
      delivered,
      at,
      failingAfterMs(this.o.policy.windowSeconds),
    );
    // A healthy endpoint's success is written at most once a minute: one write less per delivery.
    if (
      delivered &&
      prev &&
      !prev.failingSince &&
      prev.lastSuccessAt &&
      at.getTime() - prev.lastSuccessAt.getTime() < 60_000
    )
      return;
    const { _id, ...fields } = next;
    await endpoints.updateOne({ _id }, { $set: fields }, { upsert: true });
    // Alerts match these lines: "alert":"webhook_endpoint_failing" and its recovery.
    if (transition === "failing") {
      this.o.logger.warn(
        { partnerId, alert: "webhook_endpoint_failing", failingSince: next.failingSince },
        "webhook endpoint failing: every attempt failed for the failing period",
      );
    } else if (transition === "recovered") {
      this.o.logger.info({ partnerId, alert: "webhook_endpoint_recovered" }, "webhook endpoint recovered");
    }
  }
}
