import { createHmac } from "node:crypto";

/** Service-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of `${t}.${raw body}`>, one v1 per secret (current first). */
export function signatureHeader(secrets: readonly string[], unixSeconds: number, rawBody: string | Buffer): string {
  const macs = secrets.map((secret) =>
    createHmac("sha256", secret).update(`${unixSeconds}.`).update(rawBody).digest("hex"),
  );
  return [`t=${unixSeconds}`, ...macs.map((mac) => `v1=${mac}`)].join(",");
}
