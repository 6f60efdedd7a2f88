import { every } from "@pi/common/background/periodic";
import { openRuntime } from "@pi/common/runtime/runtime";
import { whileHolding } from "@pi/common/background/lease";
import { startRpcServer } from "@pi/common/rpc/server";
import { topicName } from "@pi/common/events/topics";
import type { Logger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { Connections } from "./connections.js";
import { connectionOutbox } from "./outbox.js";
import routes from "./routes.js";
import { deleteEndedConnections, endedConnectionCutoff } from "./retention.js";
import { repairCounters } from "./slots.js";
import { openConnectionStore } from "./store.js";
import type { Trigger } from "./state-machine.js";

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
    slotRepairMs: 60_000,
    retentionSweepMs: 10 * 60_000,
  };
}

/** Test seams: nothing in production passes them. */
export interface ConnectionServiceSeams {
  /** Runs after a write that stored an event, before its publish: the crash test kills the process here. */
  beforePublish?: (connectionId: string) => void;
  /** Awaited between a change's read and its write: the replica race test holds one replica here. */
  beforeWrite?: (connectionId: string, trigger: Trigger) => Promise<void>;
}

export async function startConnectionService(
  settings: Settings,
  logger: Logger,
  seams: ConnectionServiceSeams = {},
): Promise<RunningService> {
  const runtime = await openRuntime("connection", settings, logger);
  const store = await openConnectionStore(runtime.mongo.db);
  const intervals = roundIntervals(settings);
  const outbox = connectionOutbox(
    store.connections,
    runtime.producer,
    topicName(settings.DATA_NAMESPACE, "connectionEvents"),
    logger,
  );
  await outbox.ensureIndex();
  const trail = runtime.auditTrail("connection");
  const connectionsAudit = trail.on(store.connections);
  // An elder document's _id is its address: its records go out under the elder id, and logs never name it.
  const eldersAudit = trail.on(store.elders, { key: (doc) => doc.elderId, logId: () => "(an elder)" });
  await trail.start();
  const connections = new Connections(
    store,
    settings,
    (id) => {
      seams.beforePublish?.(id);
      outbox.afterWrite(id);
    },
    () => new Date(),
    (id) => connectionsAudit.afterWrite(id),
    seams.beforeWrite,
  );
  // The sandbox elder exists in every deployment.
  await store.elders.updateOne(
    { _id: connections.sandbox },
    { $setOnInsert: { elderId: "eld_sandbox", createdAt: new Date() } },
    { upsert: true },
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
  // One replica at a time runs a leased round; the others skip it.
  const leased = (name: string, ms: number, lease: string, task: (renew: () => Promise<boolean>) => Promise<unknown>) =>
    every(name, ms, () => whileHolding(store.leases, lease, ms, task), logger);
  const rounds = [
    every("sandbox approvals", intervals.sandboxApprovalMs, () => connections.approveDue(), logger),
    every("expiry sweep", intervals.expirySweepMs, () => connections.expireDue(), logger),
    // Recounts the pending slots and deletes past days' opening counters (slots.ts).
    leased("pending slots repair", intervals.slotRepairMs, "pending-slots-repair", (renew) =>
      repairCounters(store, new Date(), renew),
    ),
    // Deletes ended connections past ENDED_CONNECTION_RETENTION_SECONDS (retention.ts).
    leased("ended connections retention", intervals.retentionSweepMs, "ended-connections-retention", async (renew) => {
      const deleted = await deleteEndedConnections(store.connections, endedCutoff(), renew);
      if (deleted > 0) logger.info({ deleted }, "ended connections past retention deleted");
      return deleted;
    }),
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
