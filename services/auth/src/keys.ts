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

export interface KeyAudit {
  trail: Pick<AuditTrail, "entry">;
  outbox: Pick<Outbox<SigningKeyDoc, AuditEntry>, "afterWrite">;
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
  return keys.filter((k) => {
    if (k.kid === current.kid || activation(k) > now) return false;
    const successor = keys
      .filter((s) => activation(s) > activation(k) && activation(s) <= now)
      .sort((a, b) => activation(a) - activation(b))[0];
    return successor !== undefined && activation(successor) + tokenTtlMs + marginMs <= now;
  });
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
  private published: { keys: JWK[] } = { keys: [] };

  constructor(
    private readonly collection: Collection<SigningKeyDoc>,
    private readonly sealer: SecretSealer,
    private readonly audit?: KeyAudit,
    /** Revoked keys by kid (ops keys revoke): never used, even if a crash left the key's own document. */
    private readonly revoked?: Pick<Collection<{ _id: string }>, "find">,
  ) {}

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
    const audit = this.audit?.trail.entry({ action, actor, targets: [key.kid] });
    // Of replicas creating the first key together, the inserts that lose find it there.
    if (await insertIfNew(this.collection, { _id, ...key, ...(audit ? { audit: [audit] } : {}) }))
      this.audit?.outbox.afterWrite(_id);
  }

  async load(): Promise<void> {
    let keys = await this.stored();
    if (keys.length === 0) {
      await this.insert(FIRST_KEY_ID, await newStoredKey(this.sealer, new Date(0)), "signing_key.create");
      keys = await this.stored();
    }
    await this.use(keys);
  }

  private async use(keys: StoredKey[]): Promise<void> {
    for (const k of keys) {
      if (this.privateKeys.has(k.kid)) continue;
      const jwk = JSON.parse(await this.sealer.unseal(k.sealedPrivateJwk, "token-signing-key")) as JWK;
      this.privateKeys.set(k.kid, (await importJWK(jwk, JWT_ALG)) as CryptoKey);
    }
    for (const kid of this.privateKeys.keys()) if (!keys.some((k) => k.kid === kid)) this.privateKeys.delete(kid);
    this.keys = [...keys].sort((a, b) => activation(a) - activation(b) || a.kid.localeCompare(b.kid));
    this.published = { keys: this.keys.map((k) => k.publicJwk) };
  }

  signer(now = Date.now()): { kid: string; privateKey: CryptoKey } {
    const key = signingKeyOf(this.keys, now);
    return { kid: key.kid, privateKey: this.privateKeys.get(key.kid)! };
  }

  jwks(): { keys: JWK[] } {
    return this.published;
  }

  async has(kid: string): Promise<boolean> {
    return (await this.stored()).some((k) => k.kid === kid);
  }

  /** An emergency revocation's first half: when `kid` signs now, adds a key that signs at once; its kid. */
  async replaceIfSigning(kid: string): Promise<string | undefined> {
    const all = await this.stored();
    if (all.length === 0 || signingKeyOf(all, Date.now()).kid !== kid) return undefined;
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
