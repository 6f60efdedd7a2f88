import { clientsFor } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import type { Settings } from "@pi/common/runtime/settings";
import { ExtractionWorker, type Extract } from "@pi/extraction";
import { as } from "../../../test/support/services.js";

// The extraction service's worker (services/extraction), driven by hand against a started
// file-intake over its extraction RPCs, as the extraction service calls them.

export interface Timing {
  leaseMs: number;
  heartbeatMs: number;
  stuckAfterMs: number;
  maxAttempts: number;
}

/**
 * Extraction of the sample PNG (64x48) in this process. The tests that need a file to reach the
 * extractor send that PNG: a text file is measured as it is received and never read back.
 */
export const samplePngDimensions: Extract = async () => ({ ok: true, kind: "image-dimensions", width: 64, height: 48 });

export function extractionWorker(
  settings: Settings,
  port: number,
  extract: Extract = samplePngDimensions,
  timing: Partial<Timing> = {},
): ExtractionWorker {
  const client = clientsFor({
    ...as(settings, "extraction"),
    FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${port}`,
  }).fileIntake();
  return new ExtractionWorker(
    client,
    { leaseMs: 60_000, heartbeatMs: 30_000, stuckAfterMs: 0, maxAttempts: 3, ...timing },
    createLogger("extraction", "silent"),
    extract,
  );
}
