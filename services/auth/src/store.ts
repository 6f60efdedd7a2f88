import type { Collection, Db } from "mongodb";
import type { KeySetDoc } from "./keys.js";

export type PartnerStatus = "active" | "suspended";
export type CredentialMode = "live" | "test";

export interface PartnerDoc {
  _id: string;
  name: string;
  status: PartnerStatus;
  scopes: string[];
  webhookUrl: string | null;
  sealedSigningSecret: string;
  createdAt: Date;
  updatedAt: Date;
}

export interface CredentialDoc {
  _id: string; // the client_id
  partnerId: string;
  mode: CredentialMode;
  secretHash: string;
  status: "active" | "revoked";
  createdAt: Date;
  revokedAt?: Date;
}

export interface AuthStore {
  partners: Collection<PartnerDoc>;
  credentials: Collection<CredentialDoc>;
  keysets: Collection<KeySetDoc>;
}

export async function openAuthStore(db: Db): Promise<AuthStore> {
  const store = {
    partners: db.collection<PartnerDoc>("partners"),
    credentials: db.collection<CredentialDoc>("credentials"),
    keysets: db.collection<KeySetDoc>("keysets"),
  };
  await store.credentials.createIndex({ partnerId: 1 });
  await store.credentials.createIndex({ status: 1 });
  await store.partners.createIndex({ status: 1 });
  return store;
}
