import { isIP } from "node:net";

// A `*_SERVICE_URL` setting: one base URL, or a comma-separated list of IP addresses (the local stack
// lists its replicas); a host name stands for every address it resolves to (in Kubernetes a headless
// Service's name resolves to its ready pods).

/** Splits and checks a `*_SERVICE_URL` value (one base URL, or a list of IP addresses); throws with a one-line reason. */
export function parseServiceUrls(value: string): URL[] {
  const urls = value.split(",").map((part) => {
    const url = URL.canParse(part.trim()) ? new URL(part.trim()) : undefined;
    if (!url) throw new Error(`${JSON.stringify(part.trim())} is not a URL`);
    if (url.protocol !== "http:") throw new Error(`${JSON.stringify(part.trim())} must be an http:// (h2c) URL`);
    if (url.pathname !== "/" || url.search || url.hash || url.username || url.password)
      throw new Error(`${JSON.stringify(part.trim())} must be a base URL (scheme, host, port)`);
    return url;
  });
  const family = new Set(urls.map((u) => isIP(u.hostname.replace(/^\[|\]$/g, ""))));
  if (urls.length > 1 && (family.has(0) || family.size > 1))
    throw new Error("a list must name IP addresses of one family (one host name stands for all its addresses)");
  return urls;
}

/**
 * The grpc-js target of a `*_SERVICE_URL`: a host name goes to grpc-js's dns resolver (every address,
 * looked up again when a connection fails or a server ends it), a list of IP addresses to the ipv4/ipv6 one.
 */
export function targetOf(value: string): string {
  const urls = parseServiceUrls(value);
  const hosts = urls.map((u) => `${u.hostname}:${u.port || 80}`).join(",");
  const family = isIP(urls[0]!.hostname.replace(/^\[|\]$/g, ""));
  return family === 0 ? `dns:${hosts}` : `ipv${family}:${hosts}`;
}
