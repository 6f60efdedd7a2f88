import { describe, expect, it } from "@jest/globals";
import { addressRefusal, isPublicAddress } from "@pi/common/runtime/egress";

const refused = [
  // IPv4 loopback, unspecified, private
  "127.0.0.1",
  "127.255.255.254",
  "0.0.0.0",
  "0.1.2.3",
  "10.0.0.1",
  "10.255.255.255",
  "172.16.0.1",
  "172.31.255.255",
  "192.168.0.1",
  "192.168.255.255",
  // link-local, with the cloud metadata address
  "169.254.0.1",
  "169.254.169.254",
  // CGNAT (Alibaba's metadata address is in it)
  "100.64.0.1",
  "100.100.100.200",
  "100.127.255.255",
  // reserved, documentation, benchmarking, IETF protocol assignments (Oracle's metadata 192.0.0.192)
  "192.0.0.192",
  "192.0.2.1",
  "198.18.0.1",
  "198.19.255.255",
  "198.51.100.7",
  "203.0.113.9",
  "240.0.0.1",
  "255.255.255.255",
  "224.0.0.1",
  "239.255.255.250",
  // IPv6 loopback, unspecified, link-local, ULA (AWS's IPv6 metadata fd00:ec2::254), multicast
  "::1",
  "::",
  "fe80::1",
  "fe80::1%eth0",
  "febf:ffff::1",
  "fc00::1",
  "fd00:ec2::254",
  "fdff:ffff::1",
  "ff02::1",
  // IPv4 inside IPv6: mapped, compatible, NAT64, 6to4, Teredo
  "::ffff:127.0.0.1",
  "::ffff:7f00:1",
  "::ffff:10.0.0.1",
  "::ffff:8.8.8.8",
  "::127.0.0.1",
  "64:ff9b::7f00:1",
  "64:ff9b::808:808",
  "2002:7f00:1::1",
  "2001:0:4136:e378:8000:63bf:3fff:fdd2",
  // IPv6 documentation and discard
  "2001:db8::1",
  "3fff::1",
  "100::1",
  // site-local (deprecated)
  "fec0::1",
  // bracketed as in a URL
  "[::1]",
];

const allowed = [
  "8.8.8.8",
  "1.1.1.1",
  "93.184.216.34",
  "172.15.255.255",
  "172.32.0.1",
  "100.63.255.255",
  "100.128.0.1",
  "192.169.0.1",
  "169.253.255.255",
  "2606:4700:4700::1111",
  "2001:4860:4860::8888",
  "[2a00:1450:4001:80b::200e]",
];

describe("outbound IP address policy", () => {
  it.each(refused)("refuses %s", (address) => {
    expect(isPublicAddress(address)).toBe(false);
    expect(addressRefusal(address)).toEqual(expect.any(String));
  });

  it.each(allowed)("allows the public address %s", (address) => {
    expect(addressRefusal(address)).toBeUndefined();
  });

  it.each(["", "localhost", "example.com", "1.2.3.4.5", "::g", "999.1.1.1"])(
    "refuses %j, which is not an IP address",
    (value) => {
      expect(isPublicAddress(value)).toBe(false);
    },
  );
});
