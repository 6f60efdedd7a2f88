import { randomBytes } from "node:crypto";

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** An opaque, unguessable id: the prefix, an underscore and 22 base62 characters (about 131 bits). */
export function newId(prefix: "con" | "file" | "evt" | "ptr" | "cli" | "eld" | "key" | "req" | "tok"): string {
  const bytes = randomBytes(22);
  let out = "";
  for (const b of bytes) out += alphabet[b % 62];
  return `${prefix}_${out}`;
}

/** A high-entropy secret (256 bits), for client and signing secrets. */
export function newSecret(prefix: string): string {
  return `${prefix}_${randomBytes(32).toString("base64url")}`;
}
