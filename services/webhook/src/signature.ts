import { createHmac } from "node:crypto";

/** Service-Signature: t=<unix seconds>,v1=<lowercase hex HMAC-SHA256 of `${t}.${raw body}`>. */
export function signatureHeader(secret: string, unixSeconds: number, rawBody: string | Buffer): string {
  const mac = createHmac("sha256", secret).update(`${unixSeconds}.`).update(rawBody).digest("hex");
  return `t=${unixSeconds},v1=${mac}`;
}
