import { randomBytes, randomFillSync } from "node:crypto";

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

const ID_BYTES = 22;
// Drawn from the CSPRNG a few kilobytes at a time, each byte used once: a draw per id was a visible
// part of a request's CPU.
const pool = Buffer.alloc(ID_BYTES * 186);
let used = pool.length;

/** An unguessable id: the prefix, "_" and 22 base62 characters (about 131 bits). */
export function newId(prefix: "act" | "con" | "file" | "evt" | "ptr" | "cli" | "eld" | "key" | "req" | "tok"): string {
  if (used + ID_BYTES > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  let out = "";
  for (let i = used; i < used + ID_BYTES; i++) out += alphabet[pool[i]! % 62];
  used += ID_BYTES;
  return `${prefix}_${out}`;
}

/** A high-entropy secret (256 bits), for client and signing secrets. */
export function newSecret(prefix: string): string {
  return `${prefix}_${randomBytes(32).toString("base64url")}`;
}
