import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from "jose";
import type { Collection } from "mongodb";
import { newId } from "@pi/common";
import { seal, unseal } from "./secrets.js";

export const JWT_ALG = "ES256";

export interface StoredKey {
  kid: string;
  publicJwk: JWK;
  sealedPrivateJwk: string;
  createdAt: Date;
  /** When the key starts signing; published in the JWKS from the moment it is stored. */
  activatesAt?: Date;
}

export interface KeySetDoc {
  _id: string;
  keys: StoredKey[];
  /** Bumped by every rotation, so that two concurrent rotations cannot lose a key. */
  version?: number;
}

const KEYSET_ID = "jwt";

const activation = (k: StoredKey) => (k.activatesAt ?? k.createdAt).getTime();

/** The key that signs at `now`: the one activated most recently. */
export function signingKeyOf(keys: readonly StoredKey[], now: number): StoredKey {
  const active = keys.filter((k) => activation(k) <= now);
  const pool = active.length > 0 ? active : keys; // never empty in practice: the first key activates at creation
  return pool.reduce((a, b) => (activation(b) > activation(a) ? b : a));
}

/**
 * Keys that may be dropped at `now`: superseded by a key that has been signing for longer than
 * the token lifetime plus a margin, so no unexpired token can carry them any more.
 */
export function retiredKeys(keys: readonly StoredKey[], now: number, tokenTtlMs: number, marginMs: number): StoredKey[] {
  const current = signingKeyOf(keys, now);
  return keys.filter((k) => {
    if (k.kid === current.kid || activation(k) > now) return false;
    const successor = keys.filter((s) => activation(s) > activation(k) && activation(s) <= now).sort((a, b) => activation(a) - activation(b))[0];
    return successor !== undefined && activation(successor) + tokenTtlMs + marginMs <= now;
  });
}

async function newStoredKey(pepper: string, activatesAt: Date): Promise<StoredKey> {
  const { publicKey, privateKey } = await generateKeyPair(JWT_ALG, { extractable: true });
  const kid = newId("key");
  return {
    kid,
    publicJwk: { ...(await exportJWK(publicKey)), kid, alg: JWT_ALG, use: "sig" },
    sealedPrivateJwk: seal(pepper, JSON.stringify(await exportJWK(privateKey))),
    createdAt: new Date(),
    activatesAt,
  };
}

/**
 * The key set every auth replica signs with, read from MongoDB so that all replicas sign and
 * verify alike. Each replica reloads it periodically; a rotated-in key becomes the signer only
 * after an activation delay longer than that reload period (and than the gateways' JWKS refresh),
 * so no token is ever signed with a key a gateway has not seen.
 */
export class KeyRing {
  private keys: StoredKey[] = [];
  private readonly privateKeys = new Map<string, CryptoKey>();
  private jwksCache: { keys: JWK[] } = { keys: [] };

  constructor(
    private readonly keysets: Collection<KeySetDoc>,
    private readonly pepper: string,
  ) {}

  /** Loads the key set, creating it on first start (an atomic upsert: concurrent replicas agree). */
  async load(): Promise<void> {
    let doc = await this.keysets.findOne({ _id: KEYSET_ID });
    if (!doc) {
      const first = await newStoredKey(this.pepper, new Date(0));
      doc = await this.keysets.findOneAndUpdate(
        { _id: KEYSET_ID },
        { $setOnInsert: { keys: [first] } },
        { upsert: true, returnDocument: "after" },
      );
    }
    await this.use(doc!.keys);
  }

  private async use(keys: StoredKey[]): Promise<void> {
    for (const k of keys) {
      if (this.privateKeys.has(k.kid)) continue;
      const jwk = JSON.parse(unseal(this.pepper, k.sealedPrivateJwk)) as JWK;
      this.privateKeys.set(k.kid, (await importJWK(jwk, JWT_ALG)) as CryptoKey);
    }
    this.keys = keys;
    this.jwksCache = { keys: keys.map((k) => k.publicJwk) };
  }

  /** The key that signs now. */
  signer(now = Date.now()): { kid: string; privateKey: CryptoKey } {
    const key = signingKeyOf(this.keys, now);
    return { kid: key.kid, privateKey: this.privateKeys.get(key.kid)! };
  }

  /** Every published key: the signer, keys not yet active, and older keys still verifying. */
  jwks(): { keys: JWK[] } {
    return this.jwksCache;
  }

  /**
   * Adds a key that starts signing after `activationDelayMs`, and drops the keys whose every
   * token has expired, in one compare-and-set of the key-set document (retried on a conflict).
   */
  async rotate(activationDelayMs: number, tokenTtlMs: number): Promise<{ added: StoredKey; retired: string[] }> {
    const added = await newStoredKey(this.pepper, new Date(Date.now() + activationDelayMs));
    for (let attempt = 0; attempt < 5; attempt++) {
      const doc = await this.keysets.findOne({ _id: KEYSET_ID });
      if (!doc) throw new Error("the key set is missing");
      const retired = retiredKeys(doc.keys, Date.now(), tokenTtlMs, activationDelayMs).map((k) => k.kid);
      const keys = [...doc.keys.filter((k) => !retired.includes(k.kid)), added];
      const version = doc.version ?? 0;
      const res = await this.keysets.updateOne(
        { _id: KEYSET_ID, version: doc.version === undefined ? { $exists: false } : version },
        { $set: { keys, version: version + 1 } },
      );
      if (res.modifiedCount === 1) {
        await this.use(keys);
        return { added, retired };
      }
    }
    throw new Error("the key set kept changing during the rotation; try again");
  }
}
