import { createHmac } from "node:crypto";

/**
 * Service-Signature: t=<unix seconds>,v1=<lowercase hex HMAC-SHA256 of `${t}.${raw body}`>, with one
 * v1 per secret given (current first): during a rotation's overlap a receiver holding either the
 * old or the new secret finds a match, as with Stripe-style verifiers.
 */
export function signatureHeader(
  secrets: string | readonly string[],
  unixSeconds: number,
  rawBody: string | Buffer,
): string {
  const macs = (typeof secrets === "string" ? [secrets] : secrets).map((secret) =>
    createHmac("sha256", secret).update(`${unixSeconds}.`).update(rawBody).digest("hex"),
  );
  return [`t=${unixSeconds}`, ...macs.map((mac) => `v1=${mac}`)].join(",");
}
