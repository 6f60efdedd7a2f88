import type { StoreSchema } from "../store-versions.js";
import { auditRecordsIntoTrailDatabase } from "./audit-records-into-trail-database.js";
import { keysUnderMode } from "./keys-under-mode.js";
import { unusedGridfsBucket } from "./unused-gridfs-bucket.js";

// Every service's store schema (docs/upgrades.md): each collection's version, 1 being the shape 4e36e67 wrote.

/** The previous release: what this one's writes must stay readable by (expand, then contract). */
export const PREVIOUS_RELEASE = "1.0.0";

export const STORE_SCHEMAS = {
  auth: {
    collections: {
      partners: 2,
      credentials: 3,
      signing_keys: 1,
      revoked_keys: 1,
      used_assertions: 1,
      gateways: 1,
      job_leases: 1,
      audit_outbox: 1,
      data_key_checks: 1,
      "auth_audit.audit_records": 3,
    },
    migrations: [auditRecordsIntoTrailDatabase],
    readableFrom: PREVIOUS_RELEASE,
  },
  connection: {
    collections: {
      elder_addresses: 1,
      connections: 3,
      pending_slots: 1,
      connections_opened: 1,
      job_leases: 1,
      audit_outbox: 1,
    },
    migrations: [],
    readableFrom: PREVIOUS_RELEASE,
  },
  "file-intake": {
    collections: {
      files: 3,
      extractions: 1,
      idempotency_keys: 2,
      uploads: 1,
      job_leases: 1,
      blob_segments: 1,
      storage_usage: 2,
      data_key_checks: 1,
      extraction_turns: 1,
    },
    migrations: [keysUnderMode, unusedGridfsBucket],
    readableFrom: PREVIOUS_RELEASE,
  },
  webhook: {
    collections: {
      webhook_events: 2,
      webhook_queue: 1,
      webhook_claims: 2,
      webhook_endpoints: 1,
      audit_outbox: 1,
    },
    migrations: [],
    readableFrom: PREVIOUS_RELEASE,
  },
} as const satisfies Record<string, StoreSchema>;
