import type { Filter } from "mongodb";
import type { Logger } from "@pi/common";
import type { WebhookSender } from "./outbound.js";
import { nextAttemptAt, type RetryPolicy } from "./schedule.js";
import { signatureHeader } from "./signature.js";
import type { AttemptRecord, WebhookEventDoc, WebhookStore } from "./store.js";
import type { TargetCache } from "./targets.js";

// Runs the schedule that lives in the database. To claim a due event, a replica inserts a claim
// document whose _id names the event's current slot (id, attempts made, nextAttemptAt): of all the
// replicas that read the same slot, exactly one insert succeeds. The winner then moves the event's
// nextAttemptAt to the end of its lease and stamps the claim on it as the lease token; only the
// token's holder records the outcome. The lease outlasts the attempt timeout, so no two replicas
// send the same attempt at once, and an attempt cut off by a crash is due again, in a new slot,
// when the lease ends. (A findOneAndUpdate would be the usual claim, but FerretDB v1 does not make
// it atomic between clients.)
//
// A slow or dead endpoint holds at most `maxPerPartner` of this replica's `maxInFlight` slots
// (each for at most the attempt timeout), and claims skip partners at their limit, so other
// partners' events keep going out.

export interface DispatcherOptions {
  store: WebhookStore;
  targets: TargetCache;
  sender: WebhookSender;
  policy: RetryPolicy;
  logger: Logger;
  maxInFlight?: number;
  maxPerPartner?: number;
  /** Longest sleep between two looks at the schedule, when nothing is known to come due. */
  idleMs?: number;
}

/** When the auth service cannot say where to send, the event waits this long; no attempt is counted. */
const TARGET_UNAVAILABLE_RETRY_MS = 5_000;
const CLAIM_SWEEP_EVERY_MS = 10 * 60_000;
const CLAIM_KEEP_MS = 60 * 60_000;

function isDuplicateKey(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === 11000;
}

export class Dispatcher {
  private readonly maxInFlight: number;
  private readonly maxPerPartner: number;
  private readonly idleMs: number;
  private readonly leaseMs: number;
  private readonly perPartner = new Map<string, number>();
  private readonly active = new Set<Promise<void>>();
  private running = false;
  private stopping = false;
  private poked = false;
  private wake: (() => void) | null = null;
  private loopDone: Promise<void> = Promise.resolve();
  private lastSweep = 0;

  constructor(private readonly o: DispatcherOptions) {
    this.maxInFlight = o.maxInFlight ?? 128;
    this.maxPerPartner = o.maxPerPartner ?? 8;
    this.idleMs = o.idleMs ?? 1_000;
    this.leaseMs = (o.policy.attemptTimeoutSeconds + 10) * 1000;
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

  get inFlight(): number {
    return this.active.size;
  }

  private async loop(): Promise<void> {
    while (this.running) {
      try {
        this.poked = false;
        await this.sweepClaims();
        await this.fillSlots();
        if (!this.running) break;
        await this.sleep(await this.idleWaitMs());
      } catch (err) {
        this.o.logger.error({ err }, "webhook schedule unreadable; retrying");
        await this.sleep(this.idleMs);
      }
    }
  }

  private saturatedPartners(): string[] {
    return [...this.perPartner].filter(([, n]) => n >= this.maxPerPartner).map(([p]) => p);
  }

  private dueFilter(now: Date): Filter<WebhookEventDoc> {
    const saturated = this.saturatedPartners();
    return { state: "pending", nextAttemptAt: { $lte: now }, ...(saturated.length > 0 ? { partnerId: { $nin: saturated } } : {}) };
  }

  private async fillSlots(): Promise<void> {
    while (this.running && this.active.size < this.maxInFlight) {
      const now = new Date();
      const room = this.maxInFlight - this.active.size;
      const candidates = await this.o.store.events
        .find(this.dueFilter(now))
        .sort({ nextAttemptAt: 1 })
        .limit(Math.min(room, 32))
        .toArray();
      let launched = 0;
      for (const doc of candidates) {
        if (!this.running || this.active.size >= this.maxInFlight) return;
        if ((this.perPartner.get(doc.partnerId) ?? 0) >= this.maxPerPartner) continue;
        const claimed = await this.claim(doc);
        if (claimed) {
          this.launch(claimed, claimed.leaseToken!);
          launched++;
        }
      }
      if (launched === 0) return;
    }
  }

  /** The event with its lease, or null when another replica has this slot or the event moved on. */
  private async claim(doc: WebhookEventDoc): Promise<WebhookEventDoc | null> {
    const slot = doc.nextAttemptAt!;
    const key = `${doc._id}:${doc.attempts}:${slot.getTime()}`;
    const leaseEnd = new Date(Date.now() + this.leaseMs);
    if (!(await this.insertClaim(key, doc._id, leaseEnd))) return null;
    const res = await this.o.store.events.updateOne(
      { _id: doc._id, state: "pending", attempts: doc.attempts, nextAttemptAt: slot },
      { $set: { nextAttemptAt: leaseEnd, leaseToken: key } },
    );
    if (res.matchedCount === 0) return null;
    return { ...doc, nextAttemptAt: leaseEnd, leaseToken: key };
  }

  private async insertClaim(key: string, eventId: string, expiresAt: Date): Promise<boolean> {
    const { claims } = this.o.store;
    try {
      await claims.insertOne({ _id: key, eventId, expiresAt });
      return true;
    } catch (err) {
      if (!isDuplicateKey(err)) throw err;
    }
    // Taken. If its lease is over, the holder died before moving the event on: take it over, once.
    const existing = await claims.findOne({ _id: key });
    if (!existing || existing.expiresAt.getTime() > Date.now()) return false;
    const removed = await claims.deleteOne({ _id: key, expiresAt: existing.expiresAt });
    if (removed.deletedCount !== 1) return false;
    try {
      await claims.insertOne({ _id: key, eventId, expiresAt });
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  /** Claims are kept long after their lease (a late reader of an old slot must still lose), then dropped. */
  private async sweepClaims(): Promise<void> {
    if (Date.now() - this.lastSweep < CLAIM_SWEEP_EVERY_MS) return;
    this.lastSweep = Date.now();
    const { deletedCount } = await this.o.store.claims.deleteMany({ expiresAt: { $lt: new Date(Date.now() - CLAIM_KEEP_MS) } });
    if (deletedCount > 0) this.o.logger.debug({ deletedCount }, "old webhook claims swept");
  }

  /** How long to sleep: until the earliest pending event not held back by a busy partner, capped. */
  private async idleWaitMs(): Promise<number> {
    if (this.poked) return 0;
    if (this.active.size >= this.maxInFlight) return this.idleMs;
    const { nextAttemptAt: _due, ...filter } = this.dueFilter(new Date());
    const next = await this.o.store.events.findOne(filter, { sort: { nextAttemptAt: 1 }, projection: { nextAttemptAt: 1 } });
    if (!next?.nextAttemptAt) return this.idleMs;
    return Math.min(Math.max(next.nextAttemptAt.getTime() - Date.now(), 5), this.idleMs);
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

  private launch(doc: WebhookEventDoc, leaseToken: string): void {
    this.perPartner.set(doc.partnerId, (this.perPartner.get(doc.partnerId) ?? 0) + 1);
    const run: Promise<void> = this.attempt(doc, leaseToken)
      .catch((err) => this.o.logger.error({ err, eventId: doc._id }, "webhook attempt could not be recorded"))
      .finally(() => {
        const left = (this.perPartner.get(doc.partnerId) ?? 1) - 1;
        if (left > 0) this.perPartner.set(doc.partnerId, left);
        else this.perPartner.delete(doc.partnerId);
        this.active.delete(run);
        this.poke();
      });
    this.active.add(run);
  }

  private async release(doc: WebhookEventDoc, leaseToken: string, dueAt: Date): Promise<void> {
    await this.o.store.events.updateOne({ _id: doc._id, leaseToken }, { $set: { nextAttemptAt: dueAt, leaseToken: null } });
  }

  private async attempt(doc: WebhookEventDoc, leaseToken: string): Promise<void> {
    const { store, targets, sender, policy, logger } = this.o;
    const log = { eventId: doc._id, partnerId: doc.partnerId };
    let target;
    try {
      target = await targets.get(doc.partnerId);
    } catch (err) {
      logger.warn({ ...log, err }, "webhook target unavailable; event waits");
      await this.release(doc, leaseToken, new Date(Date.now() + TARGET_UNAVAILABLE_RETRY_MS));
      return;
    }
    if (!target && doc.attempts === 0) {
      await store.events.updateOne({ _id: doc._id, leaseToken }, { $set: { state: "no_endpoint", nextAttemptAt: null, leaseToken: null } });
      logger.info(log, "partner has no webhook address; event kept, not sent");
      return;
    }

    const startedAt = new Date();
    const outcome = target
      ? await sender.post(target.url, doc.body, { "service-signature": signatureHeader(target.secret, Math.floor(startedAt.getTime() / 1000), doc.body) })
      : { delivered: false, statusCode: 0, durationMs: 0, error: "partner has no webhook address any more", responseExcerpt: "" };
    if (this.stopping && !outcome.delivered && outcome.statusCode === 0) {
      await this.release(doc, leaseToken, new Date());
      return;
    }

    const number = doc.attempts + 1;
    const record: AttemptRecord = {
      number,
      startedAt,
      statusCode: outcome.statusCode,
      durationMs: outcome.durationMs,
      responseExcerpt: outcome.responseExcerpt,
      ...(outcome.error ? { error: outcome.error } : {}),
    };
    let next: Pick<WebhookEventDoc, "state" | "nextAttemptAt"> & { deliveredAt?: Date };
    if (outcome.delivered) {
      next = { state: "delivered", nextAttemptAt: null, deliveredAt: new Date() };
    } else {
      const due = nextAttemptAt({ createdAt: doc.createdAt.getTime(), attemptsMade: number, lastEndedAt: Date.now() }, policy);
      next = due === null ? { state: "failed", nextAttemptAt: null } : { state: "pending", nextAttemptAt: new Date(due) };
    }
    const res = await store.events.updateOne(
      { _id: doc._id, leaseToken },
      { $set: { ...next, leaseToken: null }, $inc: { attempts: 1 }, $push: { attemptLog: record } },
    );
    const fields = { ...log, attempt: number, statusCode: outcome.statusCode, durationMs: outcome.durationMs, error: outcome.error, state: next.state };
    if (res.matchedCount === 0) logger.warn(fields, "webhook attempt outlived its lease; outcome not recorded");
    else if (outcome.delivered) logger.info(fields, "webhook delivered");
    else logger.info({ ...fields, nextAttemptAt: next.nextAttemptAt }, "webhook attempt failed");
  }
}
