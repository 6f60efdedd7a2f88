import { createHmac, timingSafeEqual } from "node:crypto";
import { openSealedValue, sealedKid, sealValue, type KeyWrapper } from "@pi/common/store/data-keys";
import { parsePeppers, type Settings } from "@pi/common/runtime/settings";

// Two keys, two jobs (docs/security.md, "Data at rest"): the PEPPER keys the HMAC of client secrets
// (256-bit random values: a keyed fast hash is as strong as a slow one here); the KEKs of DATA_KEYS
// seal what the service must use again (data-keys.ts), re-sealed at start after a rotation (reseal.ts).

export function hashSecret(pepper: string, secret: string): string {
  return createHmac("sha256", pepper).update(secret, "utf8").digest("hex");
}

// The stored hash of the decoy credential (store.ts), compared against when the client is unknown,
// so that path costs the same as a wrong secret. No secret hashes to it.
export const DUMMY_HASH = "0".repeat(64);

export const FIRST_PEPPER_ID = "p1";

export interface Peppers {
  current: string;
  byId: ReadonlyMap<string, string>;
}

/** CREDENTIAL_PEPPERS (newest first) and CREDENTIAL_PEPPER as "p1" unless the list names p1; undefined when neither is set. */
export function peppersOf(settings: Pick<Settings, "CREDENTIAL_PEPPER" | "CREDENTIAL_PEPPERS">): Peppers | undefined {
  const list = settings.CREDENTIAL_PEPPERS ? parsePeppers(settings.CREDENTIAL_PEPPERS) : [];
  if (settings.CREDENTIAL_PEPPER && !list.some((p) => p.id === FIRST_PEPPER_ID))
    list.push({ id: FIRST_PEPPER_ID, pepper: settings.CREDENTIAL_PEPPER });
  if (list.length === 0) return undefined;
  return { current: list[0]!.id, byId: new Map(list.map((p) => [p.id, p.pepper])) };
}

export interface StoredHash {
  secretHash: string;
  pepperId: string;
}

export function hashNewSecret(peppers: Peppers, secret: string): StoredHash {
  return { secretHash: hashSecret(peppers.byId.get(peppers.current)!, secret), pepperId: peppers.current };
}

/** Constant-time. An absent stored hash, or one whose pepper is gone, runs the same HMAC and comparison and fails. */
export function secretMatches(peppers: Peppers, presented: string, stored: StoredHash | undefined): boolean {
  const ownPepper = stored ? peppers.byId.get(stored.pepperId) : undefined;
  const expected = Buffer.from(stored?.secretHash ?? DUMMY_HASH, "hex");
  const actual = Buffer.from(hashSecret(ownPepper ?? peppers.byId.get(peppers.current)!, presented), "hex");
  const equal = expected.length === actual.length && timingSafeEqual(expected, actual);
  return equal && stored !== undefined && ownPepper !== undefined;
}

/** What a sealed value is; bound into its encryption, so one kind cannot stand in for another. */
export type SecretKind = "webhook-signing-secret" | "token-signing-key";

export class SecretSealer {
  constructor(private readonly wrapper: KeyWrapper) {}

  seal(plaintext: string, kind: SecretKind): Promise<string> {
    return sealValue(this.wrapper, plaintext, `auth|${kind}`);
  }

  async unseal(sealed: string, kind: SecretKind): Promise<string> {
    return (await openSealedValue(this.wrapper, sealed, `auth|${kind}`)).toString("utf8");
  }

  isCurrent(sealed: string): boolean {
    return sealedKid(sealed) === this.wrapper.currentKid;
  }
}
