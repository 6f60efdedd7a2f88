import { setTimeout as sleep } from "node:timers/promises";
import type { Filter } from "mongodb";
import { attempt, LEASE_MARGIN_MS, type AttemptContext } from "./attempt.js";
import * as queue from "./queue.js";
import { TARGET_LOOKUP_TIMEOUT_MS } from "./targets.js";
import type { QueueDoc } from "./store.js";

// Which due queue entries (queue.ts) this replica claims, and when. A slow endpoint holds at most `maxPerPartner`
// slots; idle, it sleeps until the next entry is due, at most `idleMs` (the bound on seeing other replicas' entries).

export interface DispatcherOptions extends AttemptContext {
  maxInFlight?: number;
  maxPerPartner?: number;
  idleMs?: number;
}

/** The pause after finding due entries that only other replicas' running attempts hold. */
const CONTENDED_WAIT_MS = 200;
export const DISPATCHER_IDLE_MS = 5_000;
const BATCH = 32;

export class Dispatcher {
  private readonly maxInFlight: number;
  private readonly maxPerPartner: number;
  private readonly idleMs: number;
  private readonly leaseMs: number;
  /** The attempts running here, by event id. */
  private readonly inFlight = new Map<string, { partnerId: string; run: Promise<void> }>();
  private running = false;
  private stopping = false;
  private poked = false;
  private wake = new AbortController();
  private loopDone: Promise<void> = Promise.resolve();

  constructor(private readonly o: DispatcherOptions) {
    this.maxInFlight = o.maxInFlight ?? 128;
    this.maxPerPartner = o.maxPerPartner ?? 8;
    this.idleMs = o.idleMs ?? DISPATCHER_IDLE_MS;
    // Room for the target lookup (its own deadline), the attempt and storing the outcome.
    this.leaseMs = o.policy.attemptTimeoutSeconds * 1000 + TARGET_LOOKUP_TIMEOUT_MS + 2 * LEASE_MARGIN_MS;
  }

  start(): void {
    this.running = true;
    this.loopDone = this.loop();
  }

  poke(): void {
    this.poked = true;
    this.wake.abort();
  }

  /** Stops claiming; attempts still running after `graceMs` are cut off, uncounted and due again at once. */
  async stop(graceMs = 3_000, cutOff: () => Promise<void> = async () => {}): Promise<void> {
    this.running = false;
    this.poke();
    await this.loopDone;
    const settled = Promise.allSettled([...this.inFlight.values()].map((a) => a.run));
    const timer = sleep(graceMs, "late" as const, { ref: false });
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
        const waitMs = await this.fillSlots();
        if (!this.running) break;
        await this.sleep(waitMs);
      } catch (err) {
        this.o.logger.error({ err }, "webhook schedule unreadable; retrying");
        await this.sleep(this.idleMs);
      }
    }
  }

  private async fillSlots(): Promise<number> {
    for (;;) {
      if (!this.running) return 0;
      // A slot that comes free pokes the loop.
      if (this.inFlight.size >= this.maxInFlight) return this.idleMs;
      const now = new Date();
      const limit = Math.min(this.maxInFlight - this.inFlight.size, BATCH);
      const perPartner = new Map<string, number>();
      for (const { partnerId } of this.inFlight.values())
        perPartner.set(partnerId, (perPartner.get(partnerId) ?? 0) + 1);
      const saturated = [...perPartner].filter(([, n]) => n >= this.maxPerPartner).map(([p]) => p);
      const takeable: Filter<QueueDoc> = {
        ...(saturated.length > 0 ? { partnerId: { $nin: saturated } } : {}),
        ...(this.inFlight.size > 0 ? { _id: { $nin: [...this.inFlight.keys()] } } : {}),
      };
      const batch = await this.o.store.queue.find(takeable).sort({ dueAt: 1 }).limit(limit).toArray();
      const due = batch.filter((e) => e.dueAt.getTime() <= now.getTime());
      const wanted = due.filter((e) => {
        const n = perPartner.get(e.partnerId) ?? 0;
        perPartner.set(e.partnerId, n + 1);
        return n < this.maxPerPartner;
      });
      const won = await queue.claim(this.o.store, wanted, now, this.leaseMs);
      for (const entry of won) this.launch(entry, now.getTime() + this.leaseMs);
      if (won.length > 0 && due.length === batch.length && batch.length === limit) continue;
      if (won.length < wanted.length) return CONTENDED_WAIT_MS;
      const next = batch.find((e) => e.dueAt.getTime() > now.getTime());
      return next ? Math.min(Math.max(next.dueAt.getTime() - Date.now(), 5), this.idleMs) : this.idleMs;
    }
  }

  private async sleep(ms: number): Promise<void> {
    if (this.poked || ms <= 0) return;
    this.wake = new AbortController();
    await sleep(ms, undefined, { signal: this.wake.signal }).catch(() => {});
  }

  private launch(entry: QueueDoc, leaseEnd: number): void {
    const run = attempt(this.o, entry, leaseEnd, () => this.stopping)
      .catch((err) => this.o.logger.error({ err, eventId: entry._id }, "webhook attempt could not be recorded"))
      .finally(() => {
        this.inFlight.delete(entry._id);
        this.poke();
      });
    this.inFlight.set(entry._id, { partnerId: entry.partnerId, run });
  }
}
