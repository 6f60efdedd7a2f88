import { clientsFor } from "@pi/common/rpc/clients";
import { ensureTopics, kafkaReachable, serviceKafka } from "@pi/common/events/kafka";
import { startRpcServer } from "@pi/common/rpc/server";
import type { Logger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { DEFAULT_EXTRACTION_LIMITS, Extractor } from "./extractor.js";
import { consumeFileEvents, ExtractionWorker, takeFiles, type WorkerTiming } from "./worker.js";

// The extraction service, woken by file events: takes files through file-intake's extraction RPCs (worker.ts) and
// decodes each in a child process (extractor.ts). No database: every state that matters is in file-intake's.

const TIMING: WorkerTiming = { leaseMs: 20_000, heartbeatMs: 5_000, stuckAfterMs: 30_000, maxAttempts: 3 };
/** How often an idle process looks for a waiting file without being woken by an event. */
const POLL_EVERY_MS = 5_000;

export async function startExtractionService(settings: Settings, logger: Logger): Promise<RunningService> {
  const kafka = serviceKafka(settings, "extraction", logger);
  await ensureTopics(kafka, settings.DATA_NAMESPACE, ["fileEvents"]);
  const admin = kafka.admin();
  const extractor = new Extractor({
    ...DEFAULT_EXTRACTION_LIMITS,
    timeoutMs: settings.EXTRACTION_TIME_LIMIT_SECONDS * 1000,
    cpuTimeMs: settings.EXTRACTION_CPU_TIME_LIMIT_SECONDS * 1000,
    memoryCeilingMb: settings.EXTRACTION_MEMORY_CEILING_MB,
  });
  const worker = new ExtractionWorker(clientsFor(settings).fileIntake(), TIMING, logger, (type, bytes) =>
    extractor.extract(type, bytes),
  );
  const taking = takeFiles(worker, POLL_EVERY_MS, logger);
  const consumer = await consumeFileEvents(kafka, settings.DATA_NAMESPACE, worker, taking, logger).catch(
    async (err: unknown) => {
      await taking.stop();
      throw err;
    },
  );
  const server = await startRpcServer({
    service: "extraction",
    publicKeys: settings.SERVICE_IDENTITY_PUBLIC_KEYS,
    host: settings.SERVICE_HOST,
    port: settings.EXTRACTION_SERVICE_PORT,
    routes: () => undefined,
    // Without a database of its own, traffic readiness is the consumer's; liveness adds Kafka.
    healthy: async (withKafka) => consumer.alive() && (!withKafka || (await kafkaReachable(admin))),
    logger,
  });
  return {
    port: server.port,
    async stop() {
      await server.close();
      await Promise.allSettled([taking.stop(), consumer.stop()]);
      await extractor.close();
      await admin.close().catch(() => undefined);
    },
  };
}
