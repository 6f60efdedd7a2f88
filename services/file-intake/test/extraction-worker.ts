import { clientsFor, createLogger, type Settings } from "@pi/common";
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

/** Extraction of plain text in this process (the tests here send text files). */
export const plainText: Extract = async (_type, bytes) => {
  const text = Buffer.from(bytes).toString("utf8");
  return { ok: true, kind: "plain-text", text, textLength: text.length, textTruncated: false };
};

export function extractionWorker(settings: Settings, port: number, extract: Extract = plainText, timing: Partial<Timing> = {}): ExtractionWorker {
  const client = clientsFor({ ...as(settings, "extraction"), FILE_INTAKE_SERVICE_URL: `http://127.0.0.1:${port}` }).fileIntake();
  return new ExtractionWorker(client, { leaseMs: 60_000, heartbeatMs: 30_000, stuckAfterMs: 0, maxAttempts: 3, ...timing }, createLogger("extraction", "silent"), extract);
}
