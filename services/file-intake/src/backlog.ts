import { meter, type Logger, type ObservableResult } from "@pi/common";
import type { FileStore } from "./store.js";

/**
 * The accepted files not yet processed or failed (status `received`, extraction pending), as the
 * metric `files.received.backlog` (docs/observability.md): what a slow extraction or a flood of
 * uploads leaves waiting. Counted only when a metric reader collects (by the {status, createdAt}
 * index on MongoDB); every replica reports the same store-wide count. Returns the unregistration.
 */
export function observeBacklog(store: FileStore, logger: Logger): () => void {
  const gauge = meter().createObservableGauge("files.received.backlog", {
    description: "Files accepted and not yet processed or failed",
    unit: "{file}",
  });
  const observe = async (result: ObservableResult) => {
    try {
      result.observe(await store.files.countDocuments({ status: "received" }));
    } catch (err) {
      logger.warn({ err }, "files.received.backlog not counted");
    }
  };
  gauge.addCallback(observe);
  return () => gauge.removeCallback(observe);
}
