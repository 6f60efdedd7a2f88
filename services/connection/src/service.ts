import { AuditTrail } from "@pi/common/audit-trail";
import { prepareStore } from "@pi/common/store-versions";
import { STORE_SCHEMAS } from "@pi/common/migrations/index";
import { every } from "@pi/common/background/periodic";
import { openRuntime } from "@pi/common/runtime";
import { whileHolding } from "@pi/common/background/lease";
import { sandboxElderAddress } from "@pi/common/elder-address";
import { startRpcServer } from "@pi/common/rpc/server";
import { topicName } from "@pi/common/topics";
import type { Logger } from "@pi/common/logger";
import type { RunningService } from "@pi/common/run-service";
import type { Settings } from "@pi/common/settings";
import { CLOCK_CHECK_MS, CLOCK_RULES, Connections, type Clock } from "./connections.js";
import { DatabaseClock } from "./clock-offset.js";
import { connectionOutbox } from "./outbox.js";
import routes from "./routes.js";
import { endedConnectionCutoff, retentionRound } from "./retention.js";
import { repairCounters } from "./slots.js";
import { openConnectionStore, type ConnectionStore } from "./store.js";
import type { Trigger } from "./state-machine.js";

/** The sandbox elder exists in every deployment; creating it is idempotent. */
async function ensureSandboxElder(store: ConnectionStore, address: string): Promise<void> {
  await store.elders.updateOne(
    { _id: address },
    { $setOnInsert: { elderId: "eld_sandbox", createdAt: new Date() } },
    { upsert: true },
  );
}

const clamp = (ms: number, min: number, max: number) => Math.min(max, Math.max(min, ms));

/**
 * How often the background rounds run. Sandbox approvals are polled at half the delay (at most every
 * 5 s), so one approves within delay + 5 s of its request; the spec allows delay + 60 s.
 */
export function roundIntervals(
  settings: Pick<Settings, "SANDBOX_APPROVAL_DELAY_SECONDS" | "CONNECTION_PENDING_TTL_SECONDS">,
) {
  return {
    sandboxApprovalMs: clamp((settings.SANDBOX_APPROVAL_DELAY_SECONDS * 1000) / 2, 250, 5000),
    expirySweepMs: clamp((settings.CONNECTION_PENDING_TTL_SECONDS * 1000) / 2, 1000, 60_000),
    outboxSweepMs: 5000,
    slotRepairMs: 60_000,
    retentionSweepMs: 10 * 60_000,
  };
}

/** Test seams: nothing in production passes them. */
export interface ConnectionServiceSeams {
  /**
   * Runs right after a write that stored an event, before its publish: the crash test kills the
   * process here (test/support/connection-crash-main.mjs).
   */
  beforePublish?: (connectionId: string) => void;
  /** Awaited between a change's read and its compare-and-set write: the replica race test holds one replica here. */
  beforeWrite?: (connectionId: string, trigger: Trigger) => Promise<void>;
  /** This replica's wall clock: the clock tests skew one replica's (connection-clocks.integration.test.ts). */
  clock?: Clock;
}

/**
 * The database's clock, read by an aggregation over the one document every deployment has (the
 * sandbox elder): `$$NOW`, which MongoDB and the local MongoDB-wire server both serve.
 */
export function databaseNowReader(store: ConnectionStore, sandboxAddress: string): () => Promise<Date> {
  return async () => {
    const [row] = await store.elders
      .aggregate<{ now: Date }>([
        { $match: { _id: sandboxAddress } },
        { $limit: 1 },
        { $project: { _id: 0, now: "$$NOW" } },
      ])
      .toArray();
    if (!(row?.now instanceof Date)) throw new Error("the database did not tell its time");
    return row.now;
  };
}

export async function startConnectionService(
  settings: Settings,
  logger: Logger,
  seams: ConnectionServiceSeams = {},
): Promise<RunningService> {
  const runtime = await openRuntime("connection", settings, logger);
  // The guard and the migrations (docs/upgrades.md), before anything else reads or writes the store.
  await prepareStore(runtime.mongo.db, STORE_SCHEMAS.connection, {
    client: runtime.mongo.client,
    namespace: settings.DATA_NAMESPACE,
    logger,
  }).catch(async (err: unknown) => {
    await runtime.close();
    throw err;
  });
  const store = await openConnectionStore(runtime.mongo.db);
  await ensureSandboxElder(store, sandboxElderAddress(settings.ADDRESS_DOMAIN));
  const intervals = roundIntervals(settings);
  const outbox = connectionOutbox(
    store.connections,
    runtime.producer,
    topicName(settings.DATA_NAMESPACE, "connectionEvents"),
    logger,
    {
      sweepEveryMs: intervals.outboxSweepMs,
    },
  );
  await outbox.ensureIndex();
  const trail = new AuditTrail({
    service: "connection",
    db: runtime.mongo.db,
    producer: runtime.producer,
    topic: topicName(settings.DATA_NAMESPACE, "auditEvents"),
    signingKey: settings.SERVICE_IDENTITY_KEY,
    logger,
  });
  const connectionsAudit = trail.on(store.connections);
  // An elder document's _id is its address: its records go out under the elder id, and logs never name it.
  const eldersAudit = trail.on(store.elders, { key: (doc) => doc.elderId, logId: () => "(an elder)" });
  await trail.start();
  const afterStore = (connectionId: string) => {
    seams.beforePublish?.(connectionId);
    outbox.afterWrite(connectionId);
  };
  const clock: Clock = seams.clock ?? (() => new Date());
  const databaseClock = new DatabaseClock(
    databaseNowReader(store, sandboxElderAddress(settings.ADDRESS_DOMAIN)),
    clock,
    CLOCK_RULES,
    logger,
  );
  // Measured before the first poll is served, so that leases are granted from the start.
  await databaseClock
    .measure()
    .catch((err: unknown) =>
      logger.warn({ err }, "could not read the database's clock; read leases wait for the next measurement"),
    );
  const connections = new Connections(
    store,
    settings,
    afterStore,
    clock,
    (id) => connectionsAudit.afterWrite(id),
    seams.beforeWrite,
    databaseClock,
  );

  const server = await startRpcServer({
    service: "connection",
    publicKeys: settings.SERVICE_IDENTITY_PUBLIC_KEYS,
    host: settings.SERVICE_HOST,
    port: settings.CONNECTION_SERVICE_PORT,
    adminPort: settings.CONNECTION_ADMIN_PORT,
    routes: routes({
      store,
      connections,
      settings,
      logger,
      trail,
      afterElder: (address) => eldersAudit.afterWrite(address),
    }),
    healthy: runtime.healthy,
    logger,
  });
  // Each also runs once at start: events a crash left in outboxes are published, overdue sandbox
  // approvals happen, ended windows are persisted.
  outbox.start();
  const reopenSeconds = Math.max(
    settings.CONNECTION_REOPEN_INTERVAL_SECONDS,
    settings.TEST_CONNECTION_REOPEN_INTERVAL_SECONDS,
  );
  const endedCutoff = () =>
    endedConnectionCutoff(new Date(), settings.ENDED_CONNECTION_RETENTION_SECONDS, reopenSeconds);
  const rounds = [
    // Read leases compare lease ends on the database's clock: each replica measures its own against it (clock-offset.ts).
    every("clock offset", CLOCK_CHECK_MS, () => databaseClock.measure(), logger, { runAtStart: false }),
    every("sandbox approvals", intervals.sandboxApprovalMs, () => connections.approveDue(), logger),
    every("expiry sweep", intervals.expirySweepMs, () => connections.expireDue(), logger),
    // One replica at a time recounts the pending slots and deletes past days' opening counters (slots.ts); the others skip the round.
    every(
      "pending slots repair",
      intervals.slotRepairMs,
      () =>
        whileHolding(store.leases, "pending-slots-repair", intervals.slotRepairMs, (renew) =>
          repairCounters(store, new Date(), renew),
        ),
      logger,
    ),
    // One replica at a time deletes ended connections past ENDED_CONNECTION_RETENTION_SECONDS (retention.ts).
    every(
      "ended connections retention",
      intervals.retentionSweepMs,
      () => retentionRound(store.connections, store.leases, endedCutoff, intervals.retentionSweepMs, logger),
      logger,
    ),
  ];

  return {
    port: server.port,
    adminPort: server.adminPort,
    async stop() {
      await server.close();
      await Promise.all(rounds.map((r) => r.stop()));
      await Promise.all([outbox.stop(), trail.stop()]);
      await runtime.close();
    },
  };
}
