import ipaddr from "ipaddr.js";

// Which addresses a webhook may be sent to when insecure URLs are off: public unicast only.
// IPv4: whatever ipaddr.js calls plain "unicast" (so not loopback, private, link-local, which holds
// the cloud metadata address 169.254.169.254, CGNAT, reserved, documentation, multicast...).
// IPv6: only global unicast (2000::/3) that ipaddr.js also calls "unicast", which leaves out
// loopback, ULA (fc00::/7, holding fd00:ec2::254), link-local, IPv4-mapped and -compatible,
// NAT64, 6to4, Teredo and documentation prefixes.

const globalUnicast = ipaddr.parseCIDR("2000::/3");

/** Why a connection to this IP address is refused, or undefined when it is a public address. */
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
    if (!v6.match(globalUnicast) || range !== "unicast") return `${address} is not a public address (${range === "unicast" ? "not global unicast" : range})`;
    return undefined;
  }
  return range === "unicast" ? undefined : `${address} is not a public address (${range})`;
}

export const isPublicAddress = (address: string): boolean => addressRefusal(address) === undefined;
