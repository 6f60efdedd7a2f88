import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from "jose";
import type { Collection } from "mongodb";
import { newId } from "@pi/common/rules/ids";
import { AUDIT_BOOKKEEPING, type AuditCarrier, type AuditEntry, type AuditTrail } from "@pi/common/store/audit";
import { insertIfNew, type Outbox } from "@pi/common/store/persistence";
import type { SecretSealer } from "./secrets.js";

export const JWT_ALG = "ES256";

export interface StoredKey {
  kid: string;
  publicJwk: JWK;
  sealedPrivateJwk: string;
  createdAt: Date;
  /** When the key starts signing; published in the JWKS from the moment it is stored. */
  activatesAt?: Date;
}

/** One document per key, only ever inserted (the first under a fixed _id, so replicas agree) and deleted. */
export interface SigningKeyDoc extends StoredKey, AuditCarrier {
  _id: string;
}

const KEY_PROJECTION = Object.fromEntries(AUDIT_BOOKKEEPING.map((f) => [f, 0]));

const FIRST_KEY_ID = "first";

const activation = (k: StoredKey) => (k.activatesAt ?? k.createdAt).getTime();

/** The key that signs at `now`: the one activated most recently (ties broken by kid, so every replica agrees). */
export function signingKeyOf(keys: readonly StoredKey[], now: number): StoredKey {
  const active = keys.filter((k) => activation(k) <= now);
  const pool = active.length > 0 ? active : keys; // never empty in practice: the first key activates at once
  return pool.reduce((a, b) =>
    activation(b) > activation(a) || (activation(b) === activation(a) && b.kid > a.kid) ? b : a,
  );
}

/** Keys superseded by one signing for longer than the token lifetime plus a margin: no unexpired token carries them. */
export function retiredKeys(
  keys: readonly StoredKey[],
  now: number,
  tokenTtlMs: number,
  marginMs: number,
): StoredKey[] {
  const current = signingKeyOf(keys, now);
  // Superseded that long ago: some later key activated at least that long before now.
  return keys.filter(
    (k) =>
      k.kid !== current.kid &&
      keys.some((s) => activation(s) > activation(k) && activation(s) + tokenTtlMs + marginMs <= now),
  );
}

async function newStoredKey(sealer: SecretSealer, activatesAt: Date): Promise<StoredKey> {
  const { publicKey, privateKey } = await generateKeyPair(JWT_ALG, { extractable: true });
  const kid = newId("key");
  return {
    kid,
    publicJwk: { ...(await exportJWK(publicKey)), kid, alg: JWT_ALG, use: "sig" },
    sealedPrivateJwk: await sealer.seal(JSON.stringify(await exportJWK(privateKey)), "token-signing-key"),
    createdAt: new Date(),
    activatesAt,
  };
}

/**
 * The signing keys every auth replica uses, from MongoDB. A rotated-in key signs only after a delay
 * longer than the reload period and the gateways' JWKS refresh: no token under a key a gateway lacks.
 */
export class KeyRing {
  private keys: StoredKey[] = [];
  private readonly privateKeys = new Map<string, CryptoKey>();
  private readonly auditOutbox?: Outbox<SigningKeyDoc, AuditEntry>;

  constructor(
    private readonly collection: Collection<SigningKeyDoc>,
    private readonly sealer: SecretSealer,
    /** Construct before the trail starts: the keys' audit outbox is one of its own. */
    private readonly trail?: AuditTrail,
    /** Revoked keys by kid (ops keys revoke): never used, even if a crash left the key's own document. */
    private readonly revoked?: Pick<Collection<{ _id: string }>, "find">,
  ) {
    this.auditOutbox = trail?.on(collection);
  }

  private async stored(): Promise<StoredKey[]> {
    const [docs, revoked] = await Promise.all([
      this.collection.find({}, { projection: KEY_PROJECTION }).toArray(),
      this.revoked ? this.revoked.find({}, { projection: { _id: 1 } }).toArray() : [],
    ]);
    const revokedKids = new Set(revoked.map((r) => r._id));
    return docs.filter((d) => !revokedKids.has(d.kid)).map(({ _id, ...key }) => key);
  }

  private async insert(_id: string, key: StoredKey, action: "signing_key.create" | "signing_key.rotate") {
    const actor = action === "signing_key.create" ? "system" : "operator";
    const audit = this.trail?.entry({ action, actor, targets: [key.kid] });
    // Of replicas creating the first key together, the inserts that lose find it there.
    if (await insertIfNew(this.collection, { _id, ...key, ...(audit ? { audit: [audit] } : {}) }))
      this.auditOutbox?.afterWrite(_id);
  }

  async load(): Promise<void> {
    let keys = await this.stored();
    if (keys.length === 0) {
      await this.insert(FIRST_KEY_ID, await newStoredKey(this.sealer, new Date(0)), "signing_key.create");
      keys = await this.stored();
    }
    const starting = this.keys.length === 0;
    for (const k of keys) {
      if (this.privateKeys.has(k.kid)) continue;
      const jwk = await this.sealer.unseal(k.sealedPrivateJwk, "token-signing-key");
      this.privateKeys.set(k.kid, (await importJWK(JSON.parse(jwk) as JWK, JWT_ALG)) as CryptoKey);
      // Only at start, like reseal.ts: a replica still on an older DATA_KEYS never re-seals keys added later.
      if (starting && !this.sealer.isCurrent(k.sealedPrivateJwk))
        await this.collection.updateOne(
          { kid: k.kid, sealedPrivateJwk: k.sealedPrivateJwk },
          { $set: { sealedPrivateJwk: await this.sealer.seal(jwk, "token-signing-key") } },
        );
    }
    for (const kid of this.privateKeys.keys()) if (!keys.some((k) => k.kid === kid)) this.privateKeys.delete(kid);
    this.keys = [...keys].sort((a, b) => activation(a) - activation(b) || a.kid.localeCompare(b.kid));
  }

  signer(now = Date.now()): { kid: string; privateKey: CryptoKey } {
    const key = signingKeyOf(this.keys, now);
    return { kid: key.kid, privateKey: this.privateKeys.get(key.kid)! };
  }

  jwks(): { keys: JWK[] } {
    return { keys: this.keys.map((k) => k.publicJwk) };
  }

  /** An emergency revocation's first half: when `kid` signs now, adds a key that signs at once (its kid; else ""; undefined: no such key). */
  async replaceIfSigning(kid: string): Promise<string | undefined> {
    const all = await this.stored();
    if (!all.some((k) => k.kid === kid)) return undefined;
    if (signingKeyOf(all, Date.now()).kid !== kid) return "";
    const added = await newStoredKey(this.sealer, new Date());
    await this.insert(added.kid, added, "signing_key.rotate");
    return added.kid;
  }

  async remove(kid: string): Promise<void> {
    await this.collection.deleteMany({ kid });
    await this.load();
  }

  async rotate(activationDelayMs: number, tokenTtlMs: number): Promise<{ added: StoredKey; retired: string[] }> {
    const added = await newStoredKey(this.sealer, new Date(Date.now() + activationDelayMs));
    await this.insert(added.kid, added, "signing_key.rotate");
    const retired = retiredKeys(await this.stored(), Date.now(), tokenTtlMs, activationDelayMs).map((k) => k.kid);
    if (retired.length > 0) await this.collection.deleteMany({ kid: { $in: retired } });
    await this.load();
    return { added, retired };
  }
}
