import type { Db } from "mongodb";
import type { AuditCarrier } from "@pi/common/store/audit";
import type { JobLeaseDoc } from "@pi/common/background/lease";
import type { OutboxEntry as Entry, OutboxFields } from "@pi/common/store/persistence";
import type { AppliedAct } from "./acts.js";
import type { OpeningsDoc, SlotsDoc } from "./slots.js";
import type { ConnectionMode, EventType, ExternalStatus, InternalStatus } from "./state-machine.js";

/** The elder registry, keyed by the normalised address: a lookup by _id costs the same found or not (guarantee 1). */
export interface ElderDoc extends AuditCarrier {
  _id: string;
  elderId: string;
  createdAt: Date;
}

/** An event written in the same document update as the state change it reports (outbox.ts). */
export interface OutboxEntry extends Entry {
  type: EventType;
  status: ExternalStatus;
}

export interface ConnectionDoc extends OutboxFields<OutboxEntry>, AuditCarrier {
  _id: string;
  partnerId: string;
  mode: ConnectionMode;
  address: string;
  elderId: string | null;
  status: InternalStatus;
  pendingSince: Date;
  approveAt: Date | null;
  // When a request last reopened it: the reopen bound's clock (reopenWaitSeconds).
  reopenedAt?: Date | null;
  // Bumped by every state change (and by 1.0.0's read leases): the compare-and-set guard (updateVersioned).
  version: number;
  // 1.0.0's read leases (connections.ts, waitForLegacyLeases): written by 1.0.0 replicas only.
  leasedUntil?: Date | null;
  fencedUntil?: Date | null;
  caregiverActs?: AppliedAct[];
  trace?: Record<string, string>;
  createdAt: Date;
  updatedAt: Date;
}

export type ConnectionStore = Awaited<ReturnType<typeof openConnectionStore>>;

export async function openConnectionStore(db: Db) {
  const store = {
    elders: db.collection<ElderDoc>("elder_addresses"),
    connections: db.collection<ConnectionDoc>("connections"),
    slots: db.collection<SlotsDoc>("pending_slots"),
    openings: db.collection<OpeningsDoc>("connections_opened"),
    leases: db.collection<JobLeaseDoc>("job_leases"),
  };
  // One connection per (partner, mode, address): concurrent requests converge on one id.
  await store.connections.createIndex({ partnerId: 1, mode: 1, address: 1 }, { unique: true });
  // The periodic sweeps: due sandbox approvals, pending windows that ended.
  await store.connections.createIndex({ status: 1, approveAt: 1 });
  await store.connections.createIndex({ status: 1, pendingSince: 1 });
  await store.connections.createIndex({ partnerId: 1, mode: 1, status: 1 });
  await store.connections.createIndex({ status: 1, updatedAt: 1 });
  await store.openings.createIndex({ day: 1 });
  return store;
}
