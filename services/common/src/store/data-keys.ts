import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import type { Db } from "mongodb";

// Envelope encryption (docs/security.md, "Data at rest"): a data key per thing (AES-256-GCM), stored
// wrapped by a key-encryption key (KEK) of DATA_KEYS; older KEKs only unwrap, so rotation re-encrypts nothing.

export const DATA_KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** The nonce in front, the tag behind. */
export const SEAL_OVERHEAD = NONCE_BYTES + TAG_BYTES;

/** Ids of KEKs (and of peppers): short, no separator of the formats below. */
export const KEY_ID = /^[A-Za-z0-9_-]{1,32}$/;

/** A data key wrapped by the KEK `kid`: base64url of nonce, ciphertext and tag. */
export interface WrappedKey {
  kid: string;
  wrapped: string;
}

/** A data key that cannot be used: unknown KEK, wrong key, tampered or truncated ciphertext. No key material in the message. */
export class DataKeyError extends Error {}

type Kek = { kid: string; key: Buffer };

/** `id:value[,id:value...]`, newest first (DATA_KEYS, CREDENTIAL_PEPPERS). A message never quotes a value. */
export function parseIdList(text: string, label: string, problem: (value: string) => string | undefined) {
  const out: { id: string; value: string }[] = [];
  for (const [i, entry] of text.split(",").entries()) {
    const [, id = "", value = ""] = /^([^:]*):(.*)$/s.exec(entry) ?? [];
    if (!KEY_ID.test(id))
      throw new Error(`entry ${i + 1}: the ${label} id must be 1 to 32 letters, digits, _ or -, followed by ":"`);
    const wrong = problem(value);
    if (wrong) throw new Error(`${label} ${id}: ${wrong}`);
    if (out.some((e) => e.id === id)) throw new Error(`${label} ${id}: the id is given twice`);
    out.push({ id, value });
  }
  return out;
}

/** Parses DATA_KEYS: 32-byte keys in base64(url); blanks around an entry are ignored. */
export function parseDataKeys(text: string): Kek[] {
  const entries = text.split(",").map((e) => e.trim());
  if (entries.some((e) => e === "")) throw new Error("must be kid:base64key[,kid:base64key...], newest first");
  const base64Key = (v: string) =>
    /^[A-Za-z0-9+/_-]{43}=?$/.test(v) ? undefined : "must be 32 bytes in base64 (43 or 44 characters)";
  // Node's base64 decoder takes base64url's alphabet too.
  const keys = parseIdList(entries.join(","), "key", base64Key);
  return keys.map(({ id, value }) => ({ kid: id, key: Buffer.from(value, "base64") }));
}

/** A fresh DATA_KEYS entry (what `npm start` generates into its STATE_DIR). */
export const newDataKeysEntry = (kid: string) => `${kid}:${randomBytes(DATA_KEY_BYTES).toString("base64url")}`;

const wrapAad = (kid: string) => Buffer.from(`pi-data-key.v1|${kid}`);

export type KeyWrapper = LocalKeyWrapper;

export class LocalKeyWrapper {
  private readonly keks: Map<string, Buffer>;
  readonly currentKid: string;

  constructor(keks: Kek[]) {
    if (keks.length === 0) throw new Error("no key-encryption key");
    this.keks = new Map(keks.map((k) => [k.kid, k.key]));
    this.currentKid = keks[0]!.kid;
  }

  static fromSetting(text: string): LocalKeyWrapper {
    return new LocalKeyWrapper(parseDataKeys(text));
  }

  has(kid: string): boolean {
    return this.keks.has(kid);
  }

  async wrap(dataKey: Uint8Array): Promise<WrappedKey> {
    if (dataKey.length !== DATA_KEY_BYTES) throw new DataKeyError(`a data key is ${DATA_KEY_BYTES} bytes`);
    const kid = this.currentKid;
    return { kid, wrapped: encrypt(this.keks.get(kid)!, dataKey, wrapAad(kid)).toString("base64url") };
  }

  /** The data key; throws DataKeyError for an unknown kid or a wrapped key that does not authenticate. */
  async unwrap(key: WrappedKey): Promise<Buffer> {
    const kek = this.keks.get(key.kid);
    if (!kek) throw new DataKeyError(`no key-encryption key ${JSON.stringify(key.kid)} in DATA_KEYS`);
    const dataKey = decrypt(kek, Buffer.from(key.wrapped, "base64url"), wrapAad(key.kid));
    if (dataKey.length !== DATA_KEY_BYTES) throw new DataKeyError("the unwrapped data key has the wrong length");
    return dataKey;
  }
}

/** AES-256-GCM, a fresh nonce, bound to `aad`: nonce | ciphertext | tag (into `into`, to reuse buffers). */
export function encrypt(key: Uint8Array, plaintext: Uint8Array, aad: Uint8Array | string, into?: Buffer): Buffer {
  const length = plaintext.length + SEAL_OVERHEAD;
  if (into && into.length < length) throw new RangeError(`a box of ${length} bytes does not fit in ${into.length}`);
  const out = into ? into.subarray(0, length) : Buffer.allocUnsafe(length);
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key, nonce);
  cipher.setAAD(typeof aad === "string" ? Buffer.from(aad) : aad);
  nonce.copy(out, 0);
  let at = NONCE_BYTES + cipher.update(plaintext).copy(out, NONCE_BYTES);
  at += cipher.final().copy(out, at);
  cipher.getAuthTag().copy(out, at);
  return out;
}

/** The plaintext of `encrypt`; DataKeyError when made under another key or aad, or changed. */
export function decrypt(key: Uint8Array, box: Uint8Array, aad: Uint8Array | string): Buffer {
  if (box.length < SEAL_OVERHEAD) throw new DataKeyError("ciphertext too short");
  const buf = Buffer.from(box.buffer, box.byteOffset, box.byteLength);
  const decipher = createDecipheriv("aes-256-gcm", key, buf.subarray(0, NONCE_BYTES));
  decipher.setAAD(typeof aad === "string" ? Buffer.from(aad) : aad);
  decipher.setAuthTag(buf.subarray(buf.length - TAG_BYTES));
  try {
    return Buffer.concat([decipher.update(buf.subarray(NONCE_BYTES, buf.length - TAG_BYTES)), decipher.final()]);
  } catch {
    throw new DataKeyError("ciphertext does not authenticate (wrong key, wrong context, or changed)");
  }
}

/** A segment is bound to its place and stream, the last sealed `final`: a stream cut short does not authenticate. */
export const segmentAad = (streamId: string, n: number, final: boolean) =>
  `pi-segment.v1|${streamId}|${n}|${final ? 1 : 0}`;

// A small value (a secret, a JSON document) with its own data key, as one string bound to a context
// (what the value is): v2.<kid>.<wrapped data key>.<nonce | ciphertext | tag>, base64url.
const SEALED_V2 = "v2";

export async function sealValue(wrapper: KeyWrapper, plaintext: string | Uint8Array, context: string): Promise<string> {
  const key = randomBytes(DATA_KEY_BYTES);
  const wrapped = await wrapper.wrap(key);
  const bytes = typeof plaintext === "string" ? Buffer.from(plaintext, "utf8") : plaintext;
  return [
    SEALED_V2,
    wrapped.kid,
    wrapped.wrapped,
    encrypt(key, bytes, `pi-sealed.v2|${context}`).toString("base64url"),
  ].join(".");
}

export function sealedKid(sealed: string): string | undefined {
  const [version, kid] = sealed.split(".");
  return version === SEALED_V2 && kid !== undefined && KEY_ID.test(kid) ? kid : undefined;
}

export async function openSealedValue(wrapper: KeyWrapper, sealed: string, context: string): Promise<Buffer> {
  const parts = sealed.split(".");
  if (parts.length !== 4 || parts[0] !== SEALED_V2 || !KEY_ID.test(parts[1]!))
    throw new DataKeyError("not a sealed value");
  const key = await wrapper.unwrap({ kid: parts[1]!, wrapped: parts[2]! });
  return decrypt(key, Buffer.from(parts[3]!, "base64url"), `pi-sealed.v2|${context}`);
}

/** One record per KEK that has wrapped data in a database: a wrapped random key, to prove the KEK is the same one. */
export interface KeyCheckDoc {
  _id: string; // the kid
  wrapped: string;
  createdAt: Date;
}

// `mismatched`: ids that now hold another key than the one that wrote this database (a regenerated
// Secret: the caller refuses to start). Records the current KEK.
export async function checkKeys(db: Db, wrapper: KeyWrapper): Promise<{ mismatched: string[]; missing: string[] }> {
  const checks = db.collection<KeyCheckDoc>("data_key_checks");
  if (!(await checks.findOne({ _id: wrapper.currentKid }))) {
    const probe = await wrapper.wrap(randomBytes(DATA_KEY_BYTES));
    // Replicas starting together race: the first insert wins and every one checks it below.
    await checks
      .insertOne({ _id: probe.kid, wrapped: probe.wrapped, createdAt: new Date() })
      .catch((err: { code?: unknown }) => {
        if (err.code !== 11000) throw err;
      });
  }
  const mismatched: string[] = [];
  const missing: string[] = [];
  for (const doc of await checks.find().toArray()) {
    if (!wrapper.has(doc._id)) missing.push(doc._id);
    else await wrapper.unwrap({ kid: doc._id, wrapped: doc.wrapped }).catch(() => mismatched.push(doc._id));
  }
  return { mismatched, missing };
}
