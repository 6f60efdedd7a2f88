import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import ipaddr from "ipaddr.js";
import { Agent } from "undici";
import { parseCallableUrl } from "../rules/webhook-url.js";

// Calls to addresses partners give us, insecure URLs off: https only, to a public address checked in
// the socket's own DNS lookup (against DNS rebinding). Public: ipaddr.js's "unicast", IPv6 in 2000::/3.

const globalUnicast = ipaddr.parseCIDR("2000::/3");

export function addressRefusal(address: string): string | undefined {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = ipaddr.parse(address.replace(/^\[|\]$/g, "").replace(/%.*$/, ""));
  } catch {
    return `${address} is not an IP address`;
  }
  const range = ip.range();
  if (ip.kind() === "ipv6") {
    const v6 = ip as ipaddr.IPv6;
    if (v6.isIPv4MappedAddress()) return `${address} is an IPv4-mapped address`;
    if (!v6.match(globalUnicast) || range !== "unicast")
      return `${address} is not a public address (${range === "unicast" ? "not global unicast" : range})`;
    return undefined;
  }
  return range === "unicast" ? undefined : `${address} is not a public address (${range})`;
}

export const isPublicAddress = (address: string): boolean => addressRefusal(address) === undefined;

export type Resolver = (
  hostname: string,
  options: LookupAllOptions,
  callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

export class AddressRefusedError extends Error {
  readonly code = "ERR_WEBHOOK_ADDRESS_REFUSED";
}

/** A socket lookup that resolves every address of the name and keeps only the public ones. */
export function guardedLookup(resolve: Resolver = dnsLookup): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, "", 0);
      const allowed = addresses.filter((a) => isPublicAddress(a.address));
      if (allowed.length === 0) {
        const found = addresses.map((a) => a.address).join(", ") || "nothing";
        return callback(new AddressRefusedError(`${hostname} resolves to no public address (${found})`), "", 0);
      }
      if (options.all) return callback(null, allowed);
      return callback(null, allowed[0]!.address, allowed[0]!.family);
    });
  };
}

/** Why the address must not be called at all, before any connection (`what` names it in the reason). */
export function urlRefusal(raw: string, allowInsecure: boolean, what = "webhook url"): string | undefined {
  const url = parseCallableUrl(raw, allowInsecure);
  if (typeof url === "string") return `${what} ${url}`;
  const host = url.hostname.replace(/^\[|\]$/g, "");
  return !allowInsecure && isIP(host) ? addressRefusal(host) : undefined;
}

export interface EgressOptions {
  allowInsecure: boolean;
  timeoutMs: number;
  /** Stands in for the system's DNS in tests. */
  resolve?: Resolver;
}

/** The connection pool of outbound calls to partners' addresses: public addresses only (unless insecure URLs are allowed), no redirects. */
export function egressAgent(opts: EgressOptions): Agent {
  return new Agent({
    connect: { timeout: opts.timeoutMs, ...(opts.allowInsecure ? {} : { lookup: guardedLookup(opts.resolve) }) },
    headersTimeout: opts.timeoutMs,
    bodyTimeout: opts.timeoutMs,
    keepAliveTimeout: 4_000,
    maxRedirections: 0,
  });
}

/** Reads at most `cap` bytes of a body as text and drops the rest without reading it. */
export async function readCapped(body: AsyncIterable<Buffer> & { destroy(): unknown }, cap: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= cap) break;
  }
  body.destroy();
  return Buffer.concat(chunks).subarray(0, cap).toString("utf8");
}
