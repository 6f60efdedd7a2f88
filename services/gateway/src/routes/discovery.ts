import { authorizationServerIssuer, tokenEndpointUrl, type Settings } from "@pi/common/runtime/settings";
import { gatewayRouter } from "../router.js";

// SMART App Launch's smart-configuration is what healthcare's OAuth clients read.

type Issuer = Pick<Settings, "TOKEN_ENDPOINT_URL" | "GATEWAY_PORT">;

/** RFC 8414 section 2: no authorization endpoint, so no response type (the list is required). */
export function authorizationServerMetadata(settings: Issuer) {
  const issuer = authorizationServerIssuer(settings);
  return {
    issuer,
    token_endpoint: tokenEndpointUrl(settings),
    grant_types_supported: ["client_credentials"],
    response_types_supported: [] as string[],
    token_endpoint_auth_methods_supported: ["client_secret_basic", "client_secret_post", "private_key_jwt"],
    token_endpoint_auth_signing_alg_values_supported: ["RS384", "ES384", "ES256", "RS256"],
    scopes_supported: ["connections:write", "files:write"],
    service_documentation: `${issuer}/docs`,
  };
}

/** SMART App Launch 2.x for Backend Services only: no launch or PKCE, a key pair or a secret. */
export function smartConfiguration(settings: Issuer) {
  const { service_documentation: _documentation, ...metadata } = authorizationServerMetadata(settings);
  return { ...metadata, capabilities: ["client-confidential-asymmetric", "client-confidential-symmetric"] };
}

export default function discoveryRoutes(settings: Issuer) {
  const router = gatewayRouter();
  const oauth = authorizationServerMetadata(settings);
  const smart = smartConfiguration(settings);
  router.get("/.well-known/oauth-authorization-server", (ctx) => {
    ctx.set("Cache-Control", "public, max-age=300");
    ctx.body = oauth;
  });
  router.get("/.well-known/smart-configuration", (ctx) => {
    ctx.set("Cache-Control", "public, max-age=300");
    ctx.body = smart;
  });
  return router;
}
