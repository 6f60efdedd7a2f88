import { createLogger, type Logger } from "./logger.js";
import { watchParent } from "./parent-watch.js";
import { loadSettings, refuseSetting, SettingsError, type Settings } from "./settings.js";
import { startMetricsServer } from "./metrics.js";
import { startTelemetry } from "./telemetry.js";
import { StoreRefusal } from "../store/store-versions.js";

export interface RunningService {
  /** The port the service listens on. */
  port: number;
  /** The admin plane's port, when the service has admin RPCs. */
  adminPort?: number;
  /** Settles once the service can serve fully (it may listen, and answer liveness, before). */
  ready?: Promise<void>;
  stop(): Promise<void>;
}

const shutdownGraceMs = 15_000;

/**
 * The one entry point of every service process: settings validated first (a bad one exits with a
 * one-line reason), JSON logs, a clean stop on SIGTERM or SIGINT, a crash logged and exited non-zero.
 */
export function runService(name: string, start: (settings: Settings, logger: Logger) => Promise<RunningService>) {
  const settings = loadSettings(name);
  const logger = createLogger(name, settings.LOG_LEVEL);
  // Node raises an unhandled rejection here too, as origin "unhandledRejection".
  process.on("uncaughtException", (err, origin) => {
    logger.fatal({ err, origin }, "uncaught exception");
    process.exit(1);
  });
  void (async () => {
    let running: RunningService;
    let stopTelemetry: () => Promise<void>;
    let metricsPort: number | undefined;
    try {
      stopTelemetry = await startTelemetry(name);
      running = await start(settings, logger);
      // After the start, whose refusals (a missing key, a bad setting) say more than a taken port would.
      const metrics = await startMetricsServer({
        enabled: settings.METRICS_ENABLED,
        host: settings.SERVICE_HOST,
        port: settings.METRICS_PORT,
        logger,
      });
      metricsPort = metrics?.port;
    } catch (err) {
      if (err instanceof SettingsError) refuseSetting(err);
      // The store's guard or a failed migration has logged its one line (store-versions.ts).
      if (!(err instanceof StoreRefusal)) logger.fatal({ err }, "start failed");
      process.exit(1);
    }
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal }, "stopping");
      setTimeout(() => {
        logger.error("stop took too long; exiting");
        process.exit(1);
      }, shutdownGraceMs).unref();
      try {
        await running.stop();
        await stopTelemetry();
        logger.info("stopped");
        process.exit(0);
      } catch (err) {
        logger.error({ err }, "stop failed");
        process.exit(1);
      }
    };
    process.on("SIGTERM", () => void stop("SIGTERM"));
    process.on("SIGINT", () => void stop("SIGINT"));
    watchParent(() => void stop("parent exited"), logger);
    logger.info({ port: running.port, adminPort: running.adminPort, metricsPort }, "started");
  })();
}
