import type { Collection, Db } from "mongodb";

export type InternalStatus = "pending" | "approved" | "declined" | "expired" | "revoked";
export type ConnectionMode = "live" | "test";

export interface ElderDoc {
  _id: string;
  address: string;
  createdAt: Date;
}

export interface ConnectionDoc {
  _id: string;
  partnerId: string;
  mode: ConnectionMode;
  address: string;
  // The elder the address resolved to for this mode when the request was made; null when none.
  elderId: string | null;
  status: InternalStatus;
  createdAt: Date;
  updatedAt: Date;
}

export interface ConnectionStore {
  elders: Collection<ElderDoc>;
  connections: Collection<ConnectionDoc>;
}

export async function openConnectionStore(db: Db): Promise<ConnectionStore> {
  const store = {
    elders: db.collection<ElderDoc>("elders"),
    connections: db.collection<ConnectionDoc>("connections"),
  };
  await store.elders.createIndex({ address: 1 }, { unique: true });
  // One connection per (partner, mode, address): concurrent requests converge on one id.
  await store.connections.createIndex({ partnerId: 1, mode: 1, address: 1 }, { unique: true });
  return store;
}
