import { describe, expect, it } from "@jest/globals";
import { authorizationServerMetadata, smartConfiguration } from "../src/routes/discovery.js";

describe("discovery metadata", () => {
  it("names the token endpoint behind the ingress (TOKEN_ENDPOINT_URL), and the issuer is its base", () => {
    const meta = authorizationServerMetadata({
      TOKEN_ENDPOINT_URL: "https://api.example/partners/oauth/token",
      GATEWAY_PORT: 8080,
    });
    expect(meta).toMatchObject({
      issuer: "https://api.example/partners",
      token_endpoint: "https://api.example/partners/oauth/token",
    });
    expect(meta.token_endpoint_auth_methods_supported).toEqual([
      "client_secret_basic",
      "client_secret_post",
      "private_key_jwt",
    ]);
    expect(meta.token_endpoint_auth_signing_alg_values_supported).toEqual(["RS384", "ES384", "ES256", "RS256"]);
  });

  it("defaults to the local stack's gateway port", () => {
    expect(authorizationServerMetadata({ GATEWAY_PORT: 18085 }).token_endpoint).toBe(
      "http://127.0.0.1:18085/oauth/token",
    );
  });

  it("SMART's configuration carries the same facts and the capabilities", () => {
    const smart = smartConfiguration({ GATEWAY_PORT: 8080 });
    expect(smart).toMatchObject({
      token_endpoint: "http://127.0.0.1:8080/oauth/token",
      grant_types_supported: ["client_credentials"],
    });
    expect(smart.capabilities).toContain("client-confidential-asymmetric");
  });
});
