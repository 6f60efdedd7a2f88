import { randomBytes, randomFillSync } from "node:crypto";

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

const ID_BYTES = 22;
// Drawn from the CSPRNG a few kilobytes at a time, each byte used once: a draw per id was a visible
// part of a request's CPU.
const pool = Buffer.alloc(ID_BYTES * 186);
let used = pool.length;

type IdPrefix = "act" | "con" | "file" | "evt" | "ptr" | "cli" | "eld" | "key" | "req" | "tok";

/** An unguessable id: the prefix, "_" and 22 base62 characters (about 131 bits). */
export function newId(prefix: IdPrefix): string {
  if (used + ID_BYTES > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  used += ID_BYTES;
  return newIdFrom(prefix, pool.subarray(used - ID_BYTES, used));
}

/** An id of the same shape made from the first 22 of `bytes` (a digest, for an id derived from another). */
export function newIdFrom(prefix: IdPrefix, bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < ID_BYTES; i++) out += alphabet[bytes[i]! % 62];
  return `${prefix}_${out}`;
}

export function newSecret(prefix: string): string {
  return `${prefix}_${randomBytes(32).toString("base64url")}`;
}
