import { setTimeout as sleep } from "node:timers/promises";
import type { Filter } from "mongodb";
import { auditEntry } from "@pi/common/audit";
import { connectionTransitions } from "@pi/common/metrics";
import { contextFromHeaders, inSpan, traceHeaders } from "@pi/common/telemetry";
import { emptyOutbox, isDuplicateKey, outboxEntry, updateVersioned } from "@pi/common/persistence";
import { newId } from "@pi/common/ids";
import { rateLimitedError } from "@pi/common/errors";
import { sandboxElderAddress } from "@pi/common/elder-address";
import type { Settings } from "@pi/common/settings";
import { connectionAudit } from "./audit.js";
import { limitOf, reopenVerdict, slotChange } from "./bounds.js";
import { earlierApplication, rememberAct, type AppliedAct } from "./acts.js";
import { DatabaseClock } from "./clock-offset.js";
import {
  fenceUntil,
  grantableLeaseMs,
  leaseWaitMs,
  partnerSeesNoChange,
  statusesReadAlike,
  type LeaseRules,
} from "./read-lease.js";
import { releaseOpening, takeOpening } from "./openings.js";
import { releaseSlot, takeSlot } from "./slots.js";
import {
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

// Connections in the database: every state change is a compare-and-set on the document's version
// (updateVersioned) that stores the new state and, when the change emits an event, its outbox entry
// in the same update (no transactions: one document update carries both), with its audit record
// (audit.ts) beside them. Two replicas acting on one connection at once: one write wins, the other
// reads the new state and decides again.

export type Clock = () => Date;

/** The one connection of a (partner, mode, address): equalities on exactly the fields of its unique index. */
export const connectionKey = (partnerId: string, mode: ConnectionMode, address: string) => ({
  partnerId,
  mode,
  address,
});

export interface Applied {
  doc: ConnectionDoc;
  outcome: Outcome;
  /** The act's earlier application, when its id had already changed the connection (acts.ts): nothing was done now. */
  replayed?: AppliedAct;
}

const maxAttempts = 10;

/** How many due sandbox approvals one round of one replica works on at once. */
export const SANDBOX_APPROVAL_CONCURRENCY = 32;

/**
 * Runs `work` on every item, at most `limit` at once; counts the items it returned true for. After a
 * failure no new item starts, and it throws once the ones under way have ended.
 */
async function eachAtMost<T>(limit: number, items: readonly T[], work: (item: T) => Promise<boolean>): Promise<number> {
  let next = 0;
  let count = 0;
  let failure: { err: unknown } | undefined;
  const worker = async () => {
    while (next < items.length && !failure) {
      try {
        if (await work(items[next++]!)) count++;
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure) throw failure.err;
  return count;
}

/** Clock slack between replicas of this service for read leases (read-lease.ts). */
export const LEASE_MARGIN_MS = 250;

/**
 * How far a replica's clock may be off the database's while it grants read leases: half the margin,
 * so that two replicas within it agree within the margin (clock-offset.ts); and how old its last
 * measurement may be (three rounds of CLOCK_CHECK_MS).
 */
export const CLOCK_CHECK_MS = 15_000;
export const CLOCK_RULES = { limitMs: LEASE_MARGIN_MS / 2, maxAgeMs: 3 * CLOCK_CHECK_MS };

/** What a partner's read needs: the state (stateOf), the version and lease fields; not the outbox or audit entries. */
const READ_FIELDS = {
  _id: 1,
  status: 1,
  mode: 1,
  elderId: 1,
  pendingSince: 1,
  approveAt: 1,
  version: 1,
  leasedUntil: 1,
  fencedUntil: 1,
} as const;

export class Connections {
  private readonly sandbox: string;

  constructor(
    private readonly store: ConnectionStore,
    private readonly settings: Pick<
      Settings,
      | "ADDRESS_DOMAIN"
      | "CONNECTION_PENDING_TTL_SECONDS"
      | "SANDBOX_APPROVAL_DELAY_SECONDS"
      | "PENDING_CONNECTIONS_PER_PARTNER"
      | "TEST_PENDING_CONNECTIONS_PER_PARTNER"
      | "CONNECTIONS_OPENED_PER_PARTNER_PER_DAY"
      | "TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY"
      | "CONNECTION_REOPEN_INTERVAL_SECONDS"
      | "TEST_CONNECTION_REOPEN_INTERVAL_SECONDS"
      | "CONNECTION_READ_LEASE_MS"
    >,
    /** Called right after a write that stored an event: the outbox's publish (service.ts). */
    private readonly afterStore: (connectionId: string) => void,
    private readonly clock: Clock = () => new Date(),
    /** Called right after a write that stored an audit record (every change): its relay. */
    private readonly afterAudit: (connectionId: string) => void = () => undefined,
    /** A test seam: awaited between a change's read and its compare-and-set write (the replica race test holds one replica here). */
    private readonly beforeWrite: (connectionId: string, trigger: Trigger) => Promise<void> = async () => undefined,
    /**
     * The database's clock as this replica measures it (clock-offset.ts), which lease times are kept
     * on. Without one (store tests) the local clock stands in for it and no lease is granted.
     */
    private readonly databaseClock: DatabaseClock = new DatabaseClock(
      () => Promise.reject(new Error("no database clock")),
      clock,
      CLOCK_RULES,
    ),
  ) {
    this.sandbox = sandboxElderAddress(settings.ADDRESS_DOMAIN);
    this.leases = { leaseMs: settings.CONNECTION_READ_LEASE_MS, marginMs: LEASE_MARGIN_MS };
  }

  private readonly leases: LeaseRules;

  /**
   * A partner's read: the connection (null when it is not theirs) and, when asked, a read lease on
   * its status (read-lease.ts): granted by one conditional update on the version read and no
   * writer's fence, so the status answered is the stored one for as long as the lease lasts.
   */
  async read(
    filter: Filter<ConnectionDoc> & { _id: string },
    lease: boolean,
  ): Promise<{ doc: ConnectionDoc; leaseMs: number } | null> {
    const doc = await this.store.connections.findOne(filter, { projection: READ_FIELDS });
    if (!doc) return null;
    // A replica that cannot vouch for its clock grants none: the poll reads through, as every poll
    // would with leases off.
    if (!lease || !this.databaseClock.leasesAllowed()) return { doc, leaseMs: 0 };
    const now = this.databaseClock.now();
    const fenced = doc.fencedUntil != null && doc.fencedUntil.getTime() > now.getTime();
    const ms = fenced ? 0 : grantableLeaseMs(this.stateOf(doc), this.timing(), this.leases);
    if (ms === 0) return { doc, leaseMs: 0 };
    // Granted while the stored document still reads as it did (not on its version: a change a
    // partner cannot see, a decline, must not cost a poll its lease), with no writer's fence. The
    // version moves, so a writer that read before the grant loses its compare-and-set and sees it.
    const granted = await this.store.connections.updateOne(
      {
        _id: doc._id,
        status: { $in: statusesReadAlike(doc.status) },
        pendingSince: doc.pendingSince,
        approveAt: doc.approveAt,
        $or: [{ fencedUntil: null }, { fencedUntil: { $lte: now } }],
      },
      { $max: { leasedUntil: new Date(now.getTime() + ms) }, $inc: { version: 1 } },
    );
    return { doc, leaseMs: granted.modifiedCount === 1 ? ms : 0 };
  }

  /** A change of a connection under read leases: fence new grants, then wait until the granted ones ended. */
  private async waitForLeases(doc: ConnectionDoc): Promise<void> {
    await this.store.connections.updateOne(
      { _id: doc._id },
      { $max: { fencedUntil: fenceUntil(this.databaseClock.now(), this.leases) } },
    );
    const fenced = await this.store.connections.findOne({ _id: doc._id }, { projection: { leasedUntil: 1 } });
    const waitMs = leaseWaitMs(fenced?.leasedUntil, this.databaseClock.now(), this.leases);
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

  /**
   * Test credentials resolve only the sandbox elder; live ones every elder but it. Every case runs
   * the same lookup by _id (store.ts), so the answer takes the same time whether or not the address
   * resolves.
   */
  async resolveElder(mode: ConnectionMode, address: string): Promise<string | null> {
    const elder = await this.store.elders.findOne({ _id: address });
    if (!elder || (mode === "test") !== (address === this.sandbox)) return null;
    return elder.elderId;
  }

  private pendingLimit(mode: ConnectionMode): number {
    return limitOf(
      { live: this.settings.PENDING_CONNECTIONS_PER_PARTNER, test: this.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER },
      mode,
    );
  }

  private dailyLimit(mode: ConnectionMode): number {
    return limitOf(
      {
        live: this.settings.CONNECTIONS_OPENED_PER_PARTNER_PER_DAY,
        test: this.settings.TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY,
      },
      mode,
    );
  }

  private reopenInterval(mode: ConnectionMode): number {
    return limitOf(
      {
        live: this.settings.CONNECTION_REOPEN_INTERVAL_SECONDS,
        test: this.settings.TEST_CONNECTION_REOPEN_INTERVAL_SECONDS,
      },
      mode,
    );
  }

  /**
   * POST /v1/connections: creates the (partner, mode, address) connection or returns the existing
   * one (reopened when it had ended). Past a bound it throws RATE_LIMITED, whatever the address.
   */
  async request(partnerId: string, mode: ConnectionMode, address: string): Promise<ConnectionDoc> {
    const existing = await this.store.connections.findOne(connectionKey(partnerId, mode, address));
    if (existing) {
      const applied = await this.apply({ _id: existing._id }, "request", {
        elderId: await this.resolveElder(mode, address),
      });
      if (applied) return applied.doc;
      // The retention sweep deleted it since the read (retention.ts): the address opens a new connection.
    }
    // A new connection takes its pending slot, then its opening of the day, before anything else, so
    // a refusal does the same work for every address (a refused opening gives the slot back).
    const id = newId("con");
    const t = this.timing();
    await takeSlot(this.store.slots, partnerId, mode, id, this.pendingLimit(mode), t.now);
    let opening: string;
    let elderId: string | null;
    try {
      opening = await takeOpening(this.store.openings, partnerId, mode, this.dailyLimit(mode), t.now);
    } catch (err) {
      await releaseSlot(this.store.slots, partnerId, mode, id).catch(() => undefined);
      throw err;
    }
    const giveBack = () =>
      Promise.all([releaseSlot(this.store.slots, partnerId, mode, id), releaseOpening(this.store.openings, opening)]);
    try {
      elderId = await this.resolveElder(mode, address);
    } catch (err) {
      await giveBack().catch(() => undefined);
      throw err;
    }
    const initial = initialState(mode, elderId !== null, t);
    const fresh: ConnectionDoc = {
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
    let doc: ConnectionDoc | null = null;
    for (let attempt = 1; doc === null; attempt++) {
      try {
        doc = await this.store.connections.findOneAndUpdate(
          connectionKey(partnerId, mode, address),
          { $setOnInsert: fresh },
          { upsert: true, returnDocument: "after" },
        );
      } catch (err) {
        // Concurrent upserts race to insert; the losers find the winner's document on a retry.
        if (!isDuplicateKey(err) || attempt >= maxAttempts) {
          await giveBack();
          throw err;
        }
      }
    }
    if (doc._id === id) {
      connectionTransitions.inc({ from: "none", to: doc.status });
      this.afterAudit(id);
      return doc;
    }
    // A concurrent request created it: this one's slot and opening go back.
    await giveBack();
    const repeated = await this.apply({ _id: doc._id }, "request", { elderId });
    return repeated?.doc ?? doc;
  }

  /**
   * Applies one trigger to the connection matching `filter`: null when there is none. `elderId`
   * replaces the stored resolution; `resolve` looks the address up again when it had not resolved.
   */
  async apply(
    filter: Filter<ConnectionDoc> & { _id: string },
    trigger: Trigger,
    opts: { elderId?: string | null; resolve?: boolean; actId?: string } = {},
  ): Promise<Applied | null> {
    // Only writes lost to another writer count; waits for read leases do not (each fences anew).
    for (let conflicts = 0; conflicts < maxAttempts; ) {
      const doc = await this.store.connections.findOne(filter);
      if (!doc) return null;
      const replayed = earlierApplication(doc.caregiverActs, opts.actId);
      if (replayed) return { doc, outcome: { kind: "unchanged" }, replayed };
      let elderId = opts.elderId !== undefined ? opts.elderId : doc.elderId;
      if (opts.resolve && elderId === null) elderId = await this.resolveElder(doc.mode, doc.address);
      const t = this.timing();
      const outcome = transition(this.stateOf(doc, elderId), trigger, t);
      if (outcome.kind !== "change") return { doc, outcome };

      if (trigger === "request") {
        // The only change a request makes is a reopening: at most one per interval.
        const verdict = reopenVerdict(doc.reopenedAt, t.now, this.reopenInterval(doc.mode));
        if (!verdict.ok)
          throw rateLimitedError(
            "this connection was reopened less than the reopen interval ago",
            verdict.retryAfterSeconds,
          );
      }
      const after = {
        status: outcome.to,
        mode: doc.mode,
        resolved: elderId !== null,
        pendingSince: outcome.pendingSince ?? doc.pendingSince,
        approveAt: outcome.approveAt,
      };
      const visible = !partnerSeesNoChange(this.stateOf(doc, elderId), after, t);
      if (visible && leaseWaitMs(doc.leasedUntil, this.databaseClock.now(), this.leases) > 0) {
        // Gateways may be answering the current status from memory: no change of it is stored until they stop.
        await this.waitForLeases(doc);
        continue;
      }
      const slot = slotChange(doc.status, outcome.to);
      const took =
        slot === "take" &&
        (await takeSlot(this.store.slots, doc.partnerId, doc.mode, doc._id, this.pendingLimit(doc.mode), t.now)) ===
          "taken";
      // A reopening is a connection opened that day too (openings.ts), taken after its slot as a new
      // connection's is: otherwise a partner's reopenings would grow with every connection it ever opened.
      let opening: string | null = null;
      if (trigger === "request") {
        try {
          opening = await takeOpening(this.store.openings, doc.partnerId, doc.mode, this.dailyLimit(doc.mode), t.now);
        } catch (err) {
          if (took) await releaseSlot(this.store.slots, doc.partnerId, doc.mode, doc._id).catch(() => undefined);
          throw err;
        }
      }

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
          // A visible change ends the fence it waited behind; an invisible one leaves any fence to its writer.
          ...(visible ? { fencedUntil: null } : {}),
        },
        $push: { audit: record, ...(entry ? { outbox: entry } : {}) },
      });
      if (!updated) {
        // Another writer changed it since the read: decide again on the new state.
        if (took) await releaseSlot(this.store.slots, doc.partnerId, doc.mode, doc._id);
        if (opening) await releaseOpening(this.store.openings, opening);
        conflicts++;
        continue;
      }
      connectionTransitions.inc({ from: doc.status, to: outcome.to });
      // The publishes start right after the write, before anything else is awaited: the crash test
      // kills the process here, and a relay's sweep must not have published in between.
      if (entry) this.afterStore(doc._id);
      this.afterAudit(doc._id);
      // Given back after the change; if this fails (or the process dies first) the repair gives it back (slots.ts).
      if (slot === "release")
        await releaseSlot(this.store.slots, doc.partnerId, doc.mode, doc._id).catch(() => undefined);
      return { doc: updated, outcome };
    }
    throw new Error(`connection ${filter._id}: gave up after ${maxAttempts} conflicting writes`);
  }

  /** For file-intake: an approved connection of this partner, in this mode, to an elder that resolved. */
  async isActive(partnerId: string, mode: ConnectionMode, address: string): Promise<boolean> {
    const doc = await this.store.connections.findOne(connectionKey(partnerId, mode, address));
    return doc !== null && doc.elderId !== null && effectiveStatus(this.stateOf(doc), this.timing()) === "approved";
  }

  /**
   * Approves every sandbox connection whose delay has passed; returns how many it approved. Due ones
   * are read `batch` at a time, as long as a batch comes back full, and approved `concurrency` at
   * a time: an approval that waits out a gateway's read lease (up to 1.25 s) holds up only its own
   * worker, so a burst of due connections, every one polled, approves in (count / concurrency) ×
   * (one approval) (docs/connections.md, "Sandbox auto-approval").
   */
  async approveDue(batch = 500, concurrency = SANDBOX_APPROVAL_CONCURRENCY): Promise<number> {
    let approved = 0;
    for (;;) {
      const { now } = this.timing();
      const due = await this.store.connections
        .find({ status: "pending", mode: "test", approveAt: { $lte: now } }, { projection: { _id: 1 } })
        .limit(batch)
        .toArray();
      const changed = await eachAtMost(
        concurrency,
        due,
        async ({ _id }) => (await this.apply({ _id }, "auto_approve"))?.outcome.kind === "change",
      );
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
    let expired = 0;
    for (const { _id } of due) {
      const res = await this.apply({ _id }, "expire");
      if (res?.outcome.kind === "change") expired++;
    }
    return expired;
  }
}
