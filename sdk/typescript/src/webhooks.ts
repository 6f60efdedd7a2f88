import type { components } from "./gen/api.js";

export type WebhookEvent = components["schemas"]["WebhookEvent"];

export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

export interface VerifyOptions {
  /** How far `t` may be from now (default 300 s). */
  toleranceSeconds?: number;
  /** Unix ms; for tests. */
  now?: number;
}

const hex = (bytes: ArrayBuffer) => [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("");

async function hmacHex(secret: string, data: Uint8Array): Promise<string> {
  const key = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  return hex(await crypto.subtle.sign("HMAC", key, data));
}

/** Equal strings in time that does not depend on where they differ. */
function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/**
 * Checks a `Service-Signature` header (`t=…,v1=…[,v1=…]`) against the raw body, before anything
 * parses it, and returns the event. `secrets` may hold several: during a signing-secret rotation
 * either the old or the new one matches. Throws WebhookVerificationError otherwise.
 */
export async function verifyWebhook(
  rawBody: string | Uint8Array,
  header: string | null | undefined,
  secrets: string | readonly string[],
  { toleranceSeconds = 300, now = Date.now() }: VerifyOptions = {},
): Promise<WebhookEvent> {
  let t: number | undefined;
  const signatures: string[] = [];
  for (const part of (header ?? "").split(",")) {
    const eq = part.indexOf("=");
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === "t" && /^\d+$/.test(value)) t = Number(value);
    if (key === "v1" && /^[0-9a-f]{64}$/.test(value)) signatures.push(value);
  }
  if (t === undefined || signatures.length === 0)
    throw new WebhookVerificationError("malformed Service-Signature header");
  if (Math.abs(now / 1000 - t) > toleranceSeconds)
    throw new WebhookVerificationError("timestamp outside the tolerance");
  const body = typeof rawBody === "string" ? new TextEncoder().encode(rawBody) : rawBody;
  const signed = new Uint8Array([...new TextEncoder().encode(`${t}.`), ...body]);
  let matched = false;
  for (const secret of typeof secrets === "string" ? [secrets] : secrets) {
    const expected = await hmacHex(secret, signed);
    for (const sig of signatures) matched = constantTimeEqual(sig, expected) || matched;
  }
  if (!matched) throw new WebhookVerificationError("no signature matches");
  return JSON.parse(new TextDecoder().decode(body)) as WebhookEvent;
}
