/**
 * Why a webhook address is refused, or undefined when it is fine. Without insecure URLs allowed,
 * only https:// to a named host is accepted; where it resolves is checked again at delivery time.
 */
export function checkWebhookUrl(raw: string, allowInsecure: boolean): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "is not an absolute URL";
  }
  if (raw.length > 2048) return "is longer than 2048 characters";
  if (url.username || url.password) return "must not carry credentials";
  if (url.protocol !== "https:" && !(allowInsecure && url.protocol === "http:")) {
    return allowInsecure ? "must use http or https" : "must use https";
  }
  if (!allowInsecure) {
    const host = url.hostname.replace(/^\[|\]$/g, "");
    if (host === "localhost" || /^[\d.]+$/.test(host) || host.includes(":")) return "must name a public host, not an IP address or localhost";
  }
  return undefined;
}
