import type { JSONWebKeySet } from "jose";
import type { Collection, Db } from "mongodb";
import { isDuplicateKey, type OutboxEntry, type OutboxFields } from "@pi/common/store/persistence";
import type { AuditCarrier } from "@pi/common/store/audit";
import type { PartnerMode } from "@pi/common/rules/mode";
import type { FetchedJwks, FetchOutcome } from "./assertion-keys.js";
import type { SigningKeyDoc } from "./keys.js";
import type { SecretSealer, StoredHash } from "./secrets.js";

export type PartnerStatus = "active" | "suspended";
export type CredentialMode = PartnerMode;

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
  mode: CredentialMode;
  /** HMAC-SHA256 of the secret under `pepperId`; the dummy hash for a private_key_jwt credential. */
  secretHash: string;
  /** Absent: a client secret. */
  authMethod?: "client_secret" | "private_key_jwt";
  jwks?: JSONWebKeySet;
  jwksUrl?: string;
  jwksFetched?: FetchedJwks;
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

export interface AuthStore {
  partners: Collection<PartnerDoc>;
  credentials: Collection<CredentialDoc>;
  signingKeys: Collection<SigningKeyDoc>;
  revokedKeys: Collection<RevokedKeyDoc>;
  /** Collection `gateways`, named when only gateways followed the topic. */
  followers: Collection<FollowerDoc>;
  /** Every replica inserts here before accepting an assertion: the unique _id lets exactly one accept a jti. */
  usedAssertions: Collection<UsedAssertionDoc>;
}

// A suspended partner read when the client is unknown, so an unknown client costs what a known one does (guarantee 5).
export const DECOY_PARTNER_ID = "ptr~decoy";

/** Creates the decoy partner once; of replicas starting together, the upserts that lose find it there. */
async function ensureDecoy(store: AuthStore, sealer: SecretSealer): Promise<void> {
  const now = new Date();
  const sealedSigningSecret = await sealer.seal("decoy", "webhook-signing-secret");
  try {
    await store.partners.updateOne(
      { _id: DECOY_PARTNER_ID },
      {
        $setOnInsert: {
          name: "decoy",
          status: "suspended",
          scopes: ["connections:write", "files:write"],
          webhookUrl: null,
          sealedSigningSecret,
          createdAt: now,
          updatedAt: now,
        },
      },
      { upsert: true },
    );
  } catch (err) {
    if (!isDuplicateKey(err)) throw err;
  }
}

export async function openAuthStore(db: Db, sealer: SecretSealer): Promise<AuthStore> {
  const store = {
    partners: db.collection<PartnerDoc>("partners"),
    credentials: db.collection<CredentialDoc>("credentials"),
    signingKeys: db.collection<SigningKeyDoc>("signing_keys"),
    revokedKeys: db.collection<RevokedKeyDoc>("revoked_keys"),
    followers: db.collection<FollowerDoc>("gateways"),
    usedAssertions: db.collection<UsedAssertionDoc>("used_assertions"),
  };
  await store.usedAssertions.createIndex({ expiresAt: 1 });
  await store.credentials.createIndex({ partnerId: 1 });
  await store.credentials.createIndex({ status: 1 });
  await store.partners.createIndex({ status: 1 });
  await store.partners.createIndex({ suspendedAt: 1 }, { sparse: true });
  await ensureDecoy(store, sealer);
  return store;
}

export async function sweepUsedAssertions(store: Pick<AuthStore, "usedAssertions">, now = new Date()): Promise<number> {
  return (await store.usedAssertions.deleteMany({ expiresAt: { $lt: now } })).deletedCount;
}

export async function recordJwksFetch(
  store: Pick<AuthStore, "credentials">,
  url: string,
  outcome: FetchOutcome,
): Promise<void> {
  const filter = { jwksUrl: url, authMethod: "private_key_jwt" as const };
  if ("jwks" in outcome)
    await store.credentials.updateMany(filter, {
      $set: { jwksFetched: { jwks: outcome.jwks, fetchedAt: outcome.fetchedAt } },
    });
  else await store.credentials.updateMany(filter, { $set: { jwksFetchFailedAt: outcome.failedAt } });
}

/** The active credentials with a JWK Set URL, for the scheduled fetch round (operator-made: a few per partner at most). */
export function jwksUrlCredentials(store: Pick<AuthStore, "credentials">): Promise<CredentialDoc[]> {
  return store.credentials
    .find(
      { authMethod: "private_key_jwt", status: "active", jwksUrl: { $exists: true } },
      { projection: { _id: 1, jwksUrl: 1, jwksFetched: 1, jwksFetchFailedAt: 1 } },
    )
    .toArray();
}
