import { isIP } from "node:net";

// The one rule for a webhook address, used by the auth service when a partner's address is
// registered and by the webhook service before every attempt. With insecure URLs off (the chart):
// https only, no credentials, and a named host: no IP literal (in any spelling the URL parser reads
// as one, e.g. https://2130706433/) and no localhost. Where the name resolves is checked again in
// the socket's lookup at each connection (services/webhook/src/outbound.ts), which is what counts
// against DNS rebinding. With insecure URLs on (npm start, tests): http or https to any host.

export const WEBHOOK_URL_MAX_LENGTH = 2048;

/** Why a webhook address is refused ("must use https", ...), or undefined when it is fine. */
export function webhookUrlRefusal(raw: string, allowInsecure: boolean): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "is not an absolute URL";
  }
  if (raw.length > WEBHOOK_URL_MAX_LENGTH) return `is longer than ${WEBHOOK_URL_MAX_LENGTH} characters`;
  if (url.username || url.password) return "must not carry credentials";
  if (url.protocol !== "https:" && !(allowInsecure && url.protocol === "http:")) {
    return allowInsecure ? "must use http or https" : "must use https";
  }
  if (!allowInsecure) {
    const host = url.hostname
      .replace(/^\[|\]$/g, "")
      .replace(/\.$/, "")
      .toLowerCase();
    if (host === "localhost" || isIP(host) !== 0) return "must name a public host, not an IP address or localhost";
  }
  return undefined;
}
