import { extractionBacklog, storagePartnersOverQuotaRatio, storageQuotaMaxUsedRatio } from "@pi/common/runtime/metrics";
import { quotaPressure, type QuotaLimits } from "./quota.js";
import type { FileStore } from "./store.js";

/** The threshold of pi_storage_partners_over_quota_ratio. */
export const QUOTA_PRESSURE_THRESHOLD = 0.9;

/**
 * The file-intake gauges read from the database (docs/observability.md), read by every replica at
 * each scrape: the backlog (files accepted and not yet processed or failed, by the
 * {status, createdAt} index: what a slow extraction or a flood of uploads leaves waiting) and the
 * storage quota pressure (one usage counter per partner and mode). Replicas report the same
 * store-wide values.
 */
export async function refreshFileGauges(store: FileStore, limits: QuotaLimits): Promise<void> {
  extractionBacklog.set(await store.files.countDocuments({ status: "received" }));
  const counters = await store.usage.find({}, { projection: { used: 1 } }).toArray();
  const { maxRatio, partnersOver } = quotaPressure(counters, limits, QUOTA_PRESSURE_THRESHOLD);
  storageQuotaMaxUsedRatio.set({ mode: "live" }, maxRatio.live);
  storageQuotaMaxUsedRatio.set({ mode: "test" }, maxRatio.test);
  storagePartnersOverQuotaRatio.set({ threshold: String(QUOTA_PRESSURE_THRESHOLD) }, partnersOver);
}
