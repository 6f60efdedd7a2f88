// A partner's Node program discovering the authorization server (RFC 8414) with oauth4webapi:
//   node discovery.mjs ISSUER
// Prints the metadata's token endpoint and client authentication methods as JSON.
import * as oauth from "oauth4webapi";

const issuer = new URL(process.argv[2]);
const response = await oauth.discoveryRequest(issuer, {
  algorithm: "oauth2",
  [oauth.allowInsecureRequests]: issuer.protocol === "http:",
});
const as = await oauth.processDiscoveryResponse(issuer, response);
console.log(
  JSON.stringify({
    token_endpoint: as.token_endpoint,
    token_endpoint_auth_methods_supported: as.token_endpoint_auth_methods_supported,
    token_endpoint_auth_signing_alg_values_supported: as.token_endpoint_auth_signing_alg_values_supported,
  }),
);
