// The essential work of issuing a token, shared by the bare baselines of POST /oauth/token (the
// Koa route of koa-baseline.mjs, and the bare auth service of auth-baseline.mjs): HMAC-SHA256 of
// the presented secret with a pepper, a constant-time compare, an ES256 JWT of the system's claims.
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { SignJWT, generateKeyPair } from "jose";

export async function createTokenIssuer() {
  const pepper = randomBytes(32).toString("base64url");
  const hash = (secret) => createHmac("sha256", pepper).update(secret, "utf8").digest();
  const { privateKey } = await generateKeyPair("ES256");
  const kid = `bench-${randomBytes(4).toString("hex")}`;
  const clients = new Map();
  return {
    /** [{ client_id, client_secret, partner_id, scope }] */
    addClients(list) {
      for (const c of list)
        clients.set(c.client_id, { hash: hash(c.client_secret), partner_id: c.partner_id, scope: c.scope });
    },
    /** The token response's fields, or undefined for invalid_client. */
    async issue(clientId, clientSecret) {
      const client = clients.get(clientId);
      const presented = hash(String(clientSecret ?? ""));
      if (client === undefined || !timingSafeEqual(presented, client.hash)) return undefined;
      const now = Math.floor(Date.now() / 1000);
      const token = await new SignJWT({ client_id: clientId, mode: "live", scope: client.scope })
        .setProtectedHeader({ alg: "ES256", kid, typ: "at+jwt" })
        .setSubject(client.partner_id)
        .setIssuer("pi-auth")
        .setAudience("partner-api")
        .setJti(`tok_${randomBytes(16).toString("base64url")}`)
        .setIssuedAt(now)
        .setExpirationTime(now + 900)
        .sign(privateKey);
      return { access_token: token, expires_in: 900, scope: client.scope };
    },
  };
}
