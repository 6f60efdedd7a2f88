import { isIP } from "node:net";

// The one rule for a webhook address, at registration and before every attempt; where the name
// resolves is checked at each connection (egress.ts).

export const WEBHOOK_URL_MAX_LENGTH = 2048;

/** The rule every partner address shares: the URL, or what is wrong with it ("must use https"). */
export function parseCallableUrl(raw: string, allowInsecure: boolean, maxLength = Infinity): URL | string {
  if (!URL.canParse(raw)) return "is not an absolute URL";
  if (raw.length > maxLength) return `is longer than ${maxLength} characters`;
  const url = new URL(raw);
  if (url.username || url.password) return "must not carry credentials";
  if (url.protocol !== "https:" && !(allowInsecure && url.protocol === "http:"))
    return allowInsecure ? "must use http or https" : "must use https";
  return url;
}

export function webhookUrlRefusal(raw: string, allowInsecure: boolean): string | undefined {
  const url = parseCallableUrl(raw, allowInsecure, WEBHOOK_URL_MAX_LENGTH);
  if (typeof url === "string") return url;
  const host = url.hostname
    .replace(/^\[|\]$/g, "")
    .replace(/\.$/, "")
    .toLowerCase();
  if (!allowInsecure && (host === "localhost" || isIP(host) !== 0))
    return "must name a public host, not an IP address or localhost";
  return undefined;
}
