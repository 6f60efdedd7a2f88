import { dataKeysOf, openRuntime } from "@pi/common/runtime/runtime";
import { clientsFor } from "@pi/common/rpc/clients";
import { every } from "@pi/common/background/periodic";
import {
  extractionBacklog,
  readAtScrape,
  storagePartnersOverQuotaRatio,
  storageQuotaMaxUsedRatio,
} from "@pi/common/runtime/metrics";
import { startRpcServer } from "@pi/common/rpc/server";
import type { Logger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { modeToProto } from "@pi/common/rules/mode";
import type { ConnectionCheck } from "./intake.js";
import { refreshFileGauges } from "./gauges.js";
import { IdempotencyKeys } from "./keys.js";
import { fileOutbox } from "./outbox.js";
import routes from "./routes.js";
import { retentionRound } from "./retention.js";
import { sweepStaging } from "./staging.js";
import { openFileStore } from "./store.js";
import { StorageQuota, StoreFill } from "./usage.js";
import { ExtractionRecords } from "./extraction-records.js";

// Internal periods and leases, none of them partner-visible.
const SWEEP_EVERY_MS = 60_000;
const RETENTION_SWEEP_EVERY_MS = 10 * 60_000;
/** How long one replica's retention round may run without renewing its lease. */
const RETENTION_LEASE_MS = 5 * 60_000;

export interface FileIntakeOptions {
  /** How often the outbox sweep looks for events not published yet (default 5 s). */
  relayEveryMs?: number;
  /** Replaces the connection service (unit tests only). */
  connections?: ConnectionCheck;
  /** Runs no outbox relay and no sweeps (tests that drive them by hand). */
  passive?: boolean;
}

export async function startFileIntakeService(
  settings: Settings,
  logger: Logger,
  options: FileIntakeOptions = {},
): Promise<RunningService> {
  const dataKeys = dataKeysOf(settings, "file-intake");
  const runtime = await openRuntime("file-intake", settings, logger, dataKeys);
  const store = await openFileStore(runtime.mongo.db);
  const keys = new IdempotencyKeys(store, settings.IDEMPOTENCY_TTL_SECONDS * 1000, logger);
  const outbox = fileOutbox(store.files, runtime.producer, settings.DATA_NAMESPACE, logger, options.relayEveryMs);
  await outbox.ensureIndex();
  const connectionClient = clientsFor(settings).connection();
  const connections: ConnectionCheck =
    options.connections ??
    (async (partnerId, mode, elderAddress) =>
      (await connectionClient.checkActiveConnection({ partnerId, mode: modeToProto(mode), elderAddress })).active);
  const limits = { live: settings.FILE_STORAGE_QUOTA_BYTES, test: settings.TEST_FILE_STORAGE_QUOTA_BYTES };
  const retention = { live: settings.FILE_RETENTION_SECONDS * 1000, test: settings.TEST_FILE_RETENTION_SECONDS * 1000 };
  const quota = new StorageQuota(
    store,
    limits,
    settings.MAX_FILE_BYTES,
    RETENTION_SWEEP_EVERY_MS / 1000,
    new StoreFill(store, settings.FILE_STORE_HIGH_WATER_BYTES),
  );
  const extraction = new ExtractionRecords(store, dataKeys, logger);
  const server = await startRpcServer({
    service: "file-intake",
    publicKeys: settings.SERVICE_IDENTITY_PUBLIC_KEYS,
    host: settings.SERVICE_HOST,
    port: settings.FILE_INTAKE_SERVICE_PORT,
    routes: routes({
      store,
      extraction,
      keys,
      outbox,
      connections,
      maxFileBytes: settings.MAX_FILE_BYTES,
      addressDomain: settings.ADDRESS_DOMAIN,
      dataKeys,
      quota,
      logger,
    }),
    healthy: (withKafka) => runtime.healthy(withKafka),
    logger,
  });

  const background: { stop(): Promise<void> }[] = [
    readAtScrape(
      [extractionBacklog, storageQuotaMaxUsedRatio, storagePartnersOverQuotaRatio],
      () => refreshFileGauges(store, limits),
      logger,
    ),
  ];
  const later = { runAtStart: false };
  if (!options.passive) {
    // The outbox sweep also runs at start: events a crash left behind go out.
    outbox.start();
    background.push(
      every("idempotency key sweep", SWEEP_EVERY_MS, () => keys.sweep(), logger, later),
      every("staging sweep", SWEEP_EVERY_MS, () => sweepStaging(store, new Date()), logger, later),
      // Also at start: data past retention goes even if the replicas restart often.
      every(
        "retention sweep",
        RETENTION_SWEEP_EVERY_MS,
        () => retentionRound(store, retention, RETENTION_LEASE_MS, logger),
        logger,
      ),
    );
  }
  return {
    port: server.port,
    async stop() {
      await server.close();
      await Promise.allSettled(background.map((b) => b.stop()));
      await outbox.stop();
      await runtime.close();
    },
  };
}
