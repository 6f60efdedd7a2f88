// Loaded with `node --require` (NODE_OPTIONS) by deploy/cluster/test-cluster.sh: resolves the names in
// E2E_RESOLVE ("name=address[,name=address...]") to those addresses, as `curl --resolve` does, for
// every client of this process (fetch, node:http, node:https). The tests then reach the ingress by
// the name its certificate is for, so TLS is verified as a partner would verify it (against the CA
// in NODE_EXTRA_CA_CERTS), with no entry in /etc/hosts and no DNS of the test's own.
"use strict";
const dns = require("node:dns");

const names = new Map(
  (process.env.E2E_RESOLVE ?? "")
    .split(",")
    .map((pair) => pair.trim().split("="))
    .filter(([name, address]) => name && address)
    .map(([name, address]) => [name.toLowerCase(), address]),
);
if (names.size > 0) {
  const lookup = dns.lookup;
  dns.lookup = function resolveFixed(hostname, options, callback) {
    const address = typeof hostname === "string" ? names.get(hostname.toLowerCase()) : undefined;
    return lookup.call(this, address ?? hostname, options, callback);
  };
}
