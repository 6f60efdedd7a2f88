import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from "jose";
import type { Collection } from "mongodb";
import { newId } from "@pi/common";
import { seal, unseal } from "./secrets.js";

export const JWT_ALG = "ES256";

interface StoredKey {
  kid: string;
  publicJwk: JWK;
  sealedPrivateJwk: string;
  createdAt: Date;
}

interface KeySetDoc {
  _id: string;
  // The first key signs; the others still verify (rotation: prepend a new key, drop old ones after
  // the token lifetime has passed).
  keys: StoredKey[];
}

export interface SigningKeys {
  kid: string;
  privateKey: CryptoKey;
  jwks: { keys: JWK[] };
}

async function newStoredKey(pepper: string): Promise<StoredKey> {
  const { publicKey, privateKey } = await generateKeyPair(JWT_ALG, { extractable: true });
  const kid = newId("key");
  return {
    kid,
    publicJwk: { ...(await exportJWK(publicKey)), kid, alg: JWT_ALG, use: "sig" },
    sealedPrivateJwk: seal(pepper, JSON.stringify(await exportJWK(privateKey))),
    createdAt: new Date(),
  };
}

/**
 * Loads the key set, creating it on first start. The upsert with $setOnInsert is atomic, so
 * replicas starting together all end up with the one key set that won.
 */
export async function loadSigningKeys(keysets: Collection<KeySetDoc>, pepper: string): Promise<SigningKeys> {
  const candidate = await newStoredKey(pepper);
  const doc = await keysets.findOneAndUpdate(
    { _id: "jwt" },
    { $setOnInsert: { keys: [candidate] } },
    { upsert: true, returnDocument: "after" },
  );
  const current = doc!.keys[0]!;
  const privateKey = (await importJWK(JSON.parse(unseal(pepper, current.sealedPrivateJwk)) as JWK, JWT_ALG)) as CryptoKey;
  return { kid: current.kid, privateKey, jwks: { keys: doc!.keys.map((k) => k.publicJwk) } };
}

export type { KeySetDoc };
