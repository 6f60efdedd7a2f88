import { extractionBacklog, storagePartnersOverQuotaRatio, storageQuotaMaxUsedRatio } from "@pi/common/runtime/metrics";
import { quotaPressure, type QuotaLimits } from "./quota.js";
import type { FileStore } from "./store.js";

/** The threshold of pi_storage_partners_over_quota_ratio. */
export const QUOTA_PRESSURE_THRESHOLD = 0.9;

/** The backlog and the quota pressure (docs/observability.md), store-wide: every replica reports the same. */
export async function refreshFileGauges(store: FileStore, limits: QuotaLimits): Promise<void> {
  extractionBacklog.set(await store.files.countDocuments({ status: "received" }));
  const counters = await store.usage.find({}, { projection: { used: 1 } }).toArray();
  const { maxRatio, partnersOver } = quotaPressure(counters, limits, QUOTA_PRESSURE_THRESHOLD);
  storageQuotaMaxUsedRatio.set({ mode: "live" }, maxRatio.live);
  storageQuotaMaxUsedRatio.set({ mode: "test" }, maxRatio.test);
  storagePartnersOverQuotaRatio.set({ threshold: String(QUOTA_PRESSURE_THRESHOLD) }, partnersOver);
}
