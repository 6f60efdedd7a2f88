import type { StoreSchema } from "../store-versions.js";
import { auditRecordsIntoTrailDatabase } from "./audit-records-into-trail-database.js";
import { keysUnderMode } from "./keys-under-mode.js";
import { unusedGridfsBucket } from "./unused-gridfs-bucket.js";

// Every service's store schema in one place (docs/upgrades.md): the version of each collection it
// owns (1: the shape 4e36e67 wrote, the oldest a deployment may run; each change of a shape since
// adds one, with the line that says what changed and how it is read), its migrations, and the
// oldest release that reads what this release writes. Each service passes its schema to
// prepareStore (store-versions.ts) at start.

/** The previous release: what this one's writes must stay readable by (expand, then contract). */
export const PREVIOUS_RELEASE = "1.0.0";

export const STORE_SCHEMAS = {
  auth: {
    service: "auth",
    collections: {
      // 2: `suspendedAt` (1.0.0); tokens issued at or before it stay refused. Absent reads as never suspended.
      partners: 2,
      // 2: `authMethod`, `jwks`, `jwksUrl` for private_key_jwt (1.0.0); absent reads as a client secret.
      // 3: `jwksFetched`, `jwksFetchFailedAt` (1.1.0): a JWK Set URL's set as last fetched in the
      // background; absent reads as not fetched yet (the next round fetches it; 1.0.0 ignores both).
      credentials: 3,
      signing_keys: 1,
      // New in 1.0.0: keys revoked by an operator.
      revoked_keys: 1,
      // New in 1.0.0: private_key_jwt assertions' used jti.
      used_assertions: 1,
      gateways: 1,
      job_leases: 1,
      audit_outbox: 1,
      data_key_checks: 1,
      // 2: moved from this database into `<ns>_auth_audit` (1.0.0); migration 0001 copies what 4e36e67 left here.
      // 3: `signature`, `signingKid` kept (1.1.0); absent reads as "stored before signatures were kept".
      "auth_audit.audit_records": 3,
    },
    migrations: [auditRecordsIntoTrailDatabase],
    readableFrom: PREVIOUS_RELEASE,
  },
  connection: {
    service: "connection",
    collections: {
      elder_addresses: 1,
      // 2: `reopenedAt`, `leasedUntil`, `fencedUntil` (1.0.0); absent reads as never reopened, no lease.
      // 3: `caregiverActs` (1.1.0), the newest acts that changed it by act id; absent reads as none
      // (1.0.0 ignores it and its acts carry no id).
      connections: 3,
      // New in 1.0.0: the pending-connection bound's counters (the repair round recounts them).
      pending_slots: 1,
      // New in 1.0.0: the per-day bound's counters.
      connections_opened: 1,
      job_leases: 1,
      audit_outbox: 1,
    },
    migrations: [],
    readableFrom: PREVIOUS_RELEASE,
  },
  "file-intake": {
    service: "file-intake",
    collections: {
      // 2: `textLength`, `failureReason` added, `blobStore` no longer written (1.0.0); GridFS blobs were never deployed.
      // 3: `sandboxOutcome` (1.1.0) on test files sent with purpose sandbox_failed; absent reads as
      // extracted as usual (1.0.0 ignores it and processes such a file).
      files: 3,
      extractions: 1,
      // 2: under `<partner>:<mode>:<key>` with `mode` and `claimedUntil` (1.0.0); migration 0001 moves 4e36e67's.
      idempotency_keys: 2,
      uploads: 1,
      job_leases: 1,
      blob_segments: 1,
      // 2: `version` instead of `rev` as the repair's compare-and-set (1.0.0); the first write adds it, absent reads as null.
      storage_usage: 2,
      data_key_checks: 1,
      // New in 1.1.0: each partner's extraction turn (TakeNextFileForExtraction); 1.0.0 never reads it.
      extraction_turns: 1,
    },
    migrations: [keysUnderMode, unusedGridfsBucket],
    readableFrom: PREVIOUS_RELEASE,
  },
  webhook: {
    service: "webhook",
    collections: {
      // 2: `seq` (1.0.0), the order of GET /v1/events within one instant; absent sorts first, as the oldest.
      webhook_events: 2,
      webhook_queue: 1,
      // 2: `holder` (1.0.0) of a claim taken over; absent reads as the first claimer's.
      webhook_claims: 2,
      webhook_endpoints: 1,
      audit_outbox: 1,
    },
    migrations: [],
    readableFrom: PREVIOUS_RELEASE,
  },
} as const satisfies Record<string, StoreSchema>;

export type StoreService = keyof typeof STORE_SCHEMAS;
