import type { JSONWebKeySet } from "jose";
import type { Db } from "mongodb";
import { emptyOutbox, insertIfNew, type OutboxEntry, type OutboxFields } from "@pi/common/store/persistence";
import type { AuditCarrier } from "@pi/common/store/audit";
import type { PartnerMode } from "@pi/common/rules/mode";
import type { SigningKeyDoc } from "./keys.js";
import type { SecretSealer, StoredHash } from "./secrets.js";

export type PartnerStatus = "active" | "suspended";

export interface PartnerEventEntry extends OutboxEntry {
  kind: number; // eventsv1.PartnerEventKind
  partnerId: string;
  clientId: string;
  suspendedAt?: number;
  kid?: string;
}

// Partners and credentials carry their partner events in an outbox (propagation.ts), and their audit
// records in a second one, `audit`: each stored in the same update as its change.
export interface PartnerDoc extends OutboxFields<PartnerEventEntry>, AuditCarrier {
  _id: string;
  name: string;
  status: PartnerStatus;
  scopes: string[];
  webhookUrl: string | null;
  sealedSigningSecret: string;
  previousSigningSecrets?: { sealed: string; expiresAt: Date }[];
  createdAt: Date;
  updatedAt: Date;
  /** The latest suspension (kept on reinstatement): tokens issued in or before its second stay refused. */
  suspendedAt?: Date;
}

/** A signing key revoked by an operator (ops keys revoke); the key's own document is deleted. */
export interface RevokedKeyDoc extends OutboxFields<PartnerEventEntry>, AuditCarrier {
  _id: string; // the kid
  revokedAt: Date;
}

export interface CredentialDoc extends OutboxFields<PartnerEventEntry>, StoredHash, AuditCarrier {
  _id: string; // the client_id
  partnerId: string;
  mode: PartnerMode;
  /** Absent: a client secret (secretHash the dummy hash for a private_key_jwt credential). */
  authMethod?: "client_secret" | "private_key_jwt";
  jwks?: JSONWebKeySet;
  jwksUrl?: string;
  /** The URL's set, as last fetched (absent until a fetch succeeded: a credential of an older release). */
  jwksFetched?: { jwks: JSONWebKeySet; fetchedAt: Date };
  jwksFetchFailedAt?: Date;
  status: "active" | "revoked";
  createdAt: Date;
  revokedAt?: Date;
}

export type FollowerKind = "gateway" | "auth";

export interface FollowerDoc {
  _id: string; // instance id
  kind?: FollowerKind; // absent: a gateway (written before auth replicas followed the topic)
  // Partition (as a string key) to the offset of the next event the instance will apply.
  nextOffsets: Record<string, number>;
  seenAt: Date;
}

export interface UsedAssertionDoc {
  _id: string; // usedJtiKey(client id, jti); for a failed assertion, a random decoy key (below)
  expiresAt: Date;
}

// A suspended partner read when the client is unknown, so an unknown client costs what a known one does (guarantee 5).
export const DECOY_PARTNER_ID = "ptr~decoy";

export type AuthStore = Awaited<ReturnType<typeof openAuthStore>>;

export async function openAuthStore(db: Db, sealer: SecretSealer) {
  const store = {
    partners: db.collection<PartnerDoc>("partners"),
    credentials: db.collection<CredentialDoc>("credentials"),
    signingKeys: db.collection<SigningKeyDoc>("signing_keys"),
    revokedKeys: db.collection<RevokedKeyDoc>("revoked_keys"),
    /** Named when only gateways followed the topic. */
    followers: db.collection<FollowerDoc>("gateways"),
    /** Every replica inserts here before accepting an assertion: the unique _id lets exactly one accept a jti. */
    usedAssertions: db.collection<UsedAssertionDoc>("used_assertions"),
  };
  await store.usedAssertions.createIndex({ expiresAt: 1 });
  await store.credentials.createIndex({ status: 1 });
  await store.partners.createIndex({ status: 1 });
  await store.partners.createIndex({ suspendedAt: 1 }, { sparse: true });
  const now = new Date();
  // Of replicas starting together, the inserts that lose find it there.
  await insertIfNew(store.partners, {
    _id: DECOY_PARTNER_ID,
    name: "decoy",
    status: "suspended",
    scopes: ["connections:write", "files:write"],
    webhookUrl: null,
    sealedSigningSecret: await sealer.seal("decoy", "webhook-signing-secret"),
    createdAt: now,
    updatedAt: now,
    ...emptyOutbox(),
  });
  return store;
}

export async function sweepUsedAssertions(store: Pick<AuthStore, "usedAssertions">, now = new Date()): Promise<number> {
  return (await store.usedAssertions.deleteMany({ expiresAt: { $lt: now } })).deletedCount;
}
