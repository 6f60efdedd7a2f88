import { setTimeout as sleep } from "node:timers/promises";
import type { Filter } from "mongodb";
import { auditEntry } from "@pi/common/store/audit";
import { connectionTransitions } from "@pi/common/runtime/metrics";
import { contextFromHeaders, inSpan, traceHeaders } from "@pi/common/runtime/telemetry";
import { emptyOutbox, insertIfNew, outboxEntry, updateVersioned } from "@pi/common/store/persistence";
import { newId } from "@pi/common/rules/ids";
import { rateLimitedError } from "@pi/common/rpc/errors";
import { sandboxElderAddress } from "@pi/common/rules/elder-address";
import type { Settings } from "@pi/common/runtime/settings";
import { connectionAudit } from "./audit.js";
import { reopenWaitSeconds, slotChange } from "./bounds.js";
import { rememberAct, type AppliedAct } from "./acts.js";
import { releaseOpening, releaseSlot, type SlotHolder, takeOpening, takeSlot } from "./slots.js";
import {
  awaitingSandboxApproval,
  effectiveStatus,
  externalStatus,
  initialState,
  transition,
  type ConnectionMode,
  type ConnectionState,
  type ExternalStatus,
  type Outcome,
  type Timing,
  type Trigger,
} from "./state-machine.js";
import type { ConnectionDoc, ConnectionStore, OutboxEntry } from "./store.js";

// Each state change is one compare-and-set update (updateVersioned) with its outbox entry and audit record.

export interface Applied {
  doc: ConnectionDoc;
  outcome: Outcome;
  replayed?: AppliedAct;
}

const maxAttempts = 10;

const BOUNDS = {
  pending: "PENDING_CONNECTIONS_PER_PARTNER",
  daily: "CONNECTIONS_OPENED_PER_PARTNER_PER_DAY",
  reopen: "CONNECTION_REOPEN_INTERVAL_SECONDS",
} as const;

// Read leases a 1.0.0 replica grants during a rollout: a change a partner sees fences new grants
// (`fencedUntil`, which 1.0.0 honours) and waits the granted ones out. Remove with 1.0.0.
const LEGACY_LEASE_MARGIN_MS = 250;
const LEGACY_FENCE_MS = 2_250;

/** A connection as its partner may name it: its id, with the partner and mode it must belong to. */
export type OwnedFilter = { _id: string; partnerId: string; mode: ConnectionMode };

const READ_FIELDS = { _id: 1, status: 1, mode: 1, elderId: 1, pendingSince: 1, approveAt: 1 } as const;

function partnerSeesNoChange(before: ConnectionState, after: ConnectionState, t: Timing): boolean {
  return (
    externalStatus(before, t) === externalStatus(after, t) &&
    before.pendingSince.getTime() === after.pendingSince.getTime() &&
    (before.approveAt?.getTime() ?? null) === (after.approveAt?.getTime() ?? null) &&
    awaitingSandboxApproval(before) === awaitingSandboxApproval(after)
  );
}

export class Connections {
  readonly sandbox: string;

  constructor(
    private readonly store: ConnectionStore,
    private readonly settings: Settings,
    /** Called right after a write that stored an event: the outbox's publish (service.ts). */
    private readonly afterStore: (connectionId: string) => void,
    private readonly clock: () => Date = () => new Date(),
    private readonly afterAudit: (connectionId: string) => void = () => undefined,
    /** A test seam between a change's read and its write (the replica race test). */
    private readonly beforeWrite: (connectionId: string, trigger: Trigger) => Promise<void> = async () => undefined,
  ) {
    this.sandbox = sandboxElderAddress(settings.ADDRESS_DOMAIN);
  }

  read(filter: Filter<ConnectionDoc> & { _id: string }): Promise<ConnectionDoc | null> {
    return this.store.connections.findOne(filter, { projection: READ_FIELDS });
  }

  /**
   * Each filter's connection (null where none, or no filter), in one query. Its partners are in the
   * filter, so another partner's connection comes back no more than an unknown id does (guarantee 3,
   * timing included); whether the partner and mode match is decided again here, per filter.
   */
  async readMany(filters: (OwnedFilter | null)[]): Promise<(ConnectionDoc | null)[]> {
    const asked = filters.filter((f) => f !== null);
    const docs = asked.length
      ? await this.store.connections
          .find(
            { _id: { $in: asked.map((f) => f._id) }, partnerId: { $in: [...new Set(asked.map((f) => f.partnerId))] } },
            { projection: { ...READ_FIELDS, partnerId: 1 } },
          )
          .toArray()
      : [];
    const byId = new Map(docs.map((d) => [d._id, d]));
    return filters.map((f) => {
      const doc = f && byId.get(f._id);
      return doc && doc.partnerId === f.partnerId && doc.mode === f.mode ? doc : null;
    });
  }

  private async waitForLegacyLeases(doc: ConnectionDoc): Promise<void> {
    await this.store.connections.updateOne(
      { _id: doc._id },
      { $max: { fencedUntil: new Date(Date.now() + LEGACY_FENCE_MS) } },
    );
    const fenced = await this.store.connections.findOne({ _id: doc._id }, { projection: { leasedUntil: 1 } });
    const waitMs = (fenced?.leasedUntil?.getTime() ?? 0) + LEGACY_LEASE_MARGIN_MS - Date.now();
    if (waitMs > 0) await sleep(waitMs);
  }

  timing(): Timing {
    return {
      now: this.clock(),
      pendingTtlSeconds: this.settings.CONNECTION_PENDING_TTL_SECONDS,
      sandboxDelaySeconds: this.settings.SANDBOX_APPROVAL_DELAY_SECONDS,
    };
  }

  stateOf(doc: ConnectionDoc, elderId = doc.elderId): ConnectionState {
    return {
      status: doc.status,
      mode: doc.mode,
      resolved: elderId !== null,
      pendingSince: doc.pendingSince,
      approveAt: doc.approveAt,
    };
  }

  external(doc: ConnectionDoc): ExternalStatus {
    return externalStatus(this.stateOf(doc), this.timing());
  }

  /** Test credentials resolve only the sandbox elder, live ones every other; one lookup by _id either way (guarantee 1). */
  async resolveElder(mode: ConnectionMode, address: string): Promise<string | null> {
    const elder = await this.store.elders.findOne({ _id: address });
    if (!elder || (mode === "test") !== (address === this.sandbox)) return null;
    return elder.elderId;
  }

  private bound(mode: ConnectionMode, which: keyof typeof BOUNDS): number {
    const name = BOUNDS[which];
    return mode === "test" ? this.settings[`TEST_${name}`] : this.settings[name];
  }

  /**
   * Takes a pending slot (when `slot`), then the day's opening (when `opening`); a refused opening gives
   * the slot back. Returns what gives back what it took (a lost write).
   */
  private async takeBounds(doc: SlotHolder, now: Date, slot: boolean, opening: boolean) {
    const { partnerId, mode } = doc;
    const took = slot && (await takeSlot(this.store.slots, doc, this.bound(mode, "pending"), now)) === "taken";
    const giveSlot = () => (took ? releaseSlot(this.store.slots, doc) : Promise.resolve());
    try {
      const day = opening && (await takeOpening(this.store.openings, partnerId, mode, this.bound(mode, "daily"), now));
      return () => Promise.all([giveSlot(), day && releaseOpening(this.store.openings, day)]);
    } catch (err) {
      await giveSlot().catch(() => undefined);
      throw err;
    }
  }

  async request(partnerId: string, mode: ConnectionMode, address: string): Promise<ConnectionDoc> {
    const existing = await this.store.connections.findOne({ partnerId, mode, address });
    if (existing) {
      const applied = await this.apply({ _id: existing._id }, "request");
      if (applied) return applied.doc;
      // The retention sweep deleted it since the read (retention.ts): the address opens a new connection.
    }
    // A new connection takes its bounds before anything else, so a refusal does the same work for every address.
    const id = newId("con");
    const t = this.timing();
    const giveBack = await this.takeBounds({ _id: id, partnerId, mode }, t.now, true, true);
    let fresh: ConnectionDoc | undefined;
    try {
      const elderId = await this.resolveElder(mode, address);
      const initial = initialState(mode, elderId !== null, t);
      const doc: ConnectionDoc = {
        _id: id,
        partnerId,
        mode,
        address,
        elderId,
        status: initial.status,
        pendingSince: initial.pendingSince,
        approveAt: initial.approveAt,
        version: 0,
        ...emptyOutbox(),
        trace: traceHeaders(),
        createdAt: t.now,
        updatedAt: t.now,
        audit: [auditEntry("connection", connectionAudit("request", { _id: id, partnerId }, elderId), t.now)],
      };
      if (await insertIfNew(this.store.connections, doc)) fresh = doc;
    } catch (err) {
      await giveBack().catch(() => undefined);
      throw err;
    }
    if (fresh) {
      connectionTransitions.inc({ from: "none", to: fresh.status });
      this.afterAudit(id);
      return fresh;
    }
    // A concurrent request inserted the connection first: this one repeats it.
    await giveBack();
    return this.request(partnerId, mode, address);
  }

  async apply(
    filter: Filter<ConnectionDoc> & { _id: string },
    trigger: Trigger,
    opts: { actId?: string } = {},
  ): Promise<Applied | null> {
    // Only writes lost to another writer count; waits for 1.0.0's read leases do not.
    for (let conflicts = 0; conflicts < maxAttempts; ) {
      const doc = await this.store.connections.findOne(filter);
      if (!doc) return null;
      const replayed = doc.caregiverActs?.find((a) => a.id === opts.actId);
      if (replayed) return { doc, outcome: { kind: "unchanged" }, replayed };
      // A request resolves the address again, as does an approval (an address unknown until now may name an elder).
      const approval = trigger === "approve" || trigger === "test_approve";
      const resolve = trigger === "request" || (approval && doc.elderId === null);
      const elderId = resolve ? await this.resolveElder(doc.mode, doc.address) : doc.elderId;
      const t = this.timing();
      const outcome = transition(this.stateOf(doc, elderId), trigger, t);
      if (outcome.kind !== "change") return { doc, outcome };

      if (trigger === "request") {
        // The only change a request makes is a reopening: at most one per interval.
        const wait = reopenWaitSeconds(doc.reopenedAt, t.now, this.bound(doc.mode, "reopen"));
        if (wait !== undefined)
          throw rateLimitedError("this connection was reopened less than the reopen interval ago", wait);
      }
      const before = this.stateOf(doc, elderId);
      const after = {
        ...before,
        status: outcome.to,
        pendingSince: outcome.pendingSince ?? doc.pendingSince,
        approveAt: outcome.approveAt,
      };
      const leased = (doc.leasedUntil?.getTime() ?? 0) + LEGACY_LEASE_MARGIN_MS > Date.now();
      if (leased && !partnerSeesNoChange(before, after, t)) {
        await this.waitForLegacyLeases(doc);
        continue;
      }
      const slot = slotChange(doc.status, outcome.to);
      // A reopening is a connection opened that day too (slots.ts): otherwise a partner's reopenings
      // would grow with every connection it ever opened.
      const giveBack = await this.takeBounds(doc, t.now, slot === "take", trigger === "request");

      const event = outcome.event;
      const entry: OutboxEntry | null = event
        ? await inSpan(
            event,
            { parent: contextFromHeaders(doc.trace), attributes: { "connection.id": doc._id } },
            async () =>
              outboxEntry(
                { type: event, status: outcome.to === "approved" ? ("approved" as const) : ("revoked" as const) },
                t.now,
              ),
          )
        : null;
      const record = auditEntry("connection", connectionAudit(trigger, doc, elderId), t.now);
      await this.beforeWrite(doc._id, trigger);
      const updated = await updateVersioned(this.store.connections, doc, {
        $set: {
          status: outcome.to,
          approveAt: outcome.approveAt,
          elderId,
          updatedAt: t.now,
          ...(outcome.pendingSince ? { pendingSince: outcome.pendingSince } : {}),
          ...(trigger === "request" ? { reopenedAt: t.now } : {}),
          ...(opts.actId !== undefined
            ? { caregiverActs: rememberAct(doc.caregiverActs, { id: opts.actId, status: outcome.to }) }
            : {}),
        },
        $push: { audit: record, ...(entry ? { outbox: entry } : {}) },
      });
      if (!updated) {
        await giveBack();
        conflicts++;
        continue;
      }
      connectionTransitions.inc({ from: doc.status, to: outcome.to });
      // The publishes start right after the write, before anything else is awaited: the crash test
      // kills the process here, and a relay's sweep must not have published in between.
      if (entry) this.afterStore(doc._id);
      this.afterAudit(doc._id);
      // Given back after the change; if this fails (or the process dies first) the repair gives it back (slots.ts).
      if (slot === "release") await releaseSlot(this.store.slots, doc).catch(() => undefined);
      return { doc: updated, outcome };
    }
    throw new Error(`connection ${filter._id}: gave up after ${maxAttempts} conflicting writes`);
  }

  async isActive(partnerId: string, mode: ConnectionMode, address: string): Promise<boolean> {
    const doc = await this.store.connections.findOne({ partnerId, mode, address });
    return doc !== null && doc.elderId !== null && effectiveStatus(this.stateOf(doc), this.timing()) === "approved";
  }

  async approveDue(batch = 500): Promise<number> {
    let approved = 0;
    for (;;) {
      const due = await this.store.connections
        .find({ status: "pending", mode: "test", approveAt: { $lte: this.clock() } }, { projection: { _id: 1 } })
        .limit(batch)
        .toArray();
      const changed = await this.applyEach(due, "auto_approve");
      approved += changed;
      // A full batch that approved nothing (another replica's round took them) is left to the next round.
      if (due.length < batch || changed === 0) return approved;
    }
  }

  /** Persists the expiry of pending windows that ended (reads show it already); no event. */
  async expireDue(limit = 500): Promise<number> {
    const t = this.timing();
    const cutoff = new Date(t.now.getTime() - t.pendingTtlSeconds * 1000);
    const due = await this.store.connections
      .find(
        { status: { $in: ["pending", "declined"] }, approveAt: null, pendingSince: { $lte: cutoff } },
        { projection: { _id: 1 } },
      )
      .limit(limit)
      .toArray();
    return this.applyEach(due, "expire");
  }

  private async applyEach(due: { _id: string }[], trigger: Trigger): Promise<number> {
    let changed = 0;
    for (const { _id } of due) if ((await this.apply({ _id }, trigger))?.outcome.kind === "change") changed++;
    return changed;
  }
}
