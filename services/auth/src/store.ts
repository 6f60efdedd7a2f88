import type { Collection, Db } from "mongodb";
import type { KeySetDoc } from "./keys.js";
import { DUMMY_HASH, seal } from "./secrets.js";

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

/** A gateway instance and how far it has applied the partner-events topic (see propagation.ts). */
export interface GatewayDoc {
  _id: string; // instance id
  // Partition (as a string key) to the offset of the next event the gateway will apply.
  nextOffsets: Record<string, number>;
  seenAt: Date;
}

export interface AuthStore {
  partners: Collection<PartnerDoc>;
  credentials: Collection<CredentialDoc>;
  keysets: Collection<KeySetDoc>;
  gateways: Collection<GatewayDoc>;
}

// A revoked credential of a suspended partner that no secret matches, read in place of an unknown
// client: every failed token request then reads one credential and one partner document, so an
// unknown client costs what a known one does (no-oracle guarantee 5). "~" sorts after every
// character of a real id ("cli_" and base62), which findCredentialOrDecoy relies on.
export const DECOY_CLIENT_ID = "cli~decoy";
export const DECOY_PARTNER_ID = "ptr~decoy";

/** The credential with this client id, or the decoy when there is none: one query either way. */
export async function findCredentialOrDecoy(store: AuthStore, clientId: string): Promise<CredentialDoc | null> {
  return store.credentials.find({ _id: { $in: [clientId, DECOY_CLIENT_ID] } }).sort({ _id: 1 }).limit(1).next();
}

async function ensureDecoy(store: AuthStore, pepper: string): Promise<void> {
  const now = new Date();
  await store.partners.updateOne(
    { _id: DECOY_PARTNER_ID },
    {
      $setOnInsert: {
        name: "decoy",
        status: "suspended",
        scopes: ["connections:write", "files:write"],
        webhookUrl: null,
        sealedSigningSecret: seal(pepper, "decoy"),
        createdAt: now,
        updatedAt: now,
      },
    },
    { upsert: true },
  );
  await store.credentials.updateOne(
    { _id: DECOY_CLIENT_ID },
    { $setOnInsert: { partnerId: DECOY_PARTNER_ID, mode: "live", secretHash: DUMMY_HASH, status: "revoked", createdAt: now } },
    { upsert: true },
  );
}

export async function openAuthStore(db: Db, pepper: string): Promise<AuthStore> {
  const store = {
    partners: db.collection<PartnerDoc>("partners"),
    credentials: db.collection<CredentialDoc>("credentials"),
    keysets: db.collection<KeySetDoc>("keysets"),
    gateways: db.collection<GatewayDoc>("gateways"),
  };
  await store.credentials.createIndex({ partnerId: 1 });
  await store.credentials.createIndex({ status: 1 });
  await store.partners.createIndex({ status: 1 });
  await ensureDecoy(store, pepper);
  return store;
}
