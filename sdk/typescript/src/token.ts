import { importJWK, importPKCS8, SignJWT, type CryptoKey, type JWK, type KeyObject } from "jose";
import { NetworkError, OAuthTokenError, PartnerApiError, type ErrorCode } from "./errors.js";
import type { components } from "./gen/api.js";

type TokenResponse = components["schemas"]["TokenResponse"];

/** The algorithms the token endpoint accepts for a client assertion (RS384 and ES384 are SMART's required pair). */
export type AssertionAlgorithm = "RS384" | "ES384" | "ES256" | "RS256";

export const CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

export interface TokenSourceOptions {
  baseUrl: string;
  clientId: string;
  /** The client secret (authMethod basic or body). */
  clientSecret?: string;
  /**
   * How the client authenticates at POST /oauth/token: an HTTP Basic header (default), the body
   * fields, or a client assertion signed with `privateKey` (private_key_jwt, RFC 7523), for a
   * credential registered with the public half of the key.
   */
  authMethod?: "basic" | "body" | "private_key_jwt";
  /** private_key_jwt: the private key, as a key object, a private JWK or a PKCS#8 PEM string. */
  privateKey?: CryptoKey | KeyObject | JWK | string;
  /** private_key_jwt: the key's id in the JWK Set the credential was registered with. */
  kid?: string;
  /** private_key_jwt: the signing algorithm of the key. */
  alg?: AssertionAlgorithm;
  /**
   * private_key_jwt: the token endpoint's URL, the assertion's `aud` (the discovery metadata's
   * `token_endpoint`); default `${baseUrl}/oauth/token`.
   */
  tokenEndpointUrl?: string;
  scope?: string;
  /** Renew when less than this many seconds of the token's life are left (default 60, at most half its life). */
  renewBeforeSeconds?: number;
  fetch?: typeof fetch;
  now?: () => number;
}

/** RFC 6749 section 2.3.1: id and secret each form-urlencoded, then joined by a colon and base64-encoded. */
export function basicCredentials(clientId: string, clientSecret: string): string {
  const enc = (v: string) => new URLSearchParams({ v }).toString().slice(2);
  return `Basic ${btoa(`${enc(clientId)}:${enc(clientSecret)}`)}`;
}

/** Fetches client-credentials tokens and keeps one until shortly before it expires; callers share one request. */
export class TokenSource {
  private token: { value: string; renewAt: number } | undefined;
  private pending: Promise<string> | undefined;
  private readonly fetch: typeof fetch;
  private readonly now: () => number;

  private signingKey: Promise<CryptoKey | KeyObject | Uint8Array> | undefined;

  constructor(private readonly o: TokenSourceOptions) {
    this.fetch = o.fetch ?? globalThis.fetch;
    this.now = o.now ?? Date.now;
    if (o.authMethod === "private_key_jwt") {
      if (!o.privateKey || !o.kid || !o.alg) throw new TypeError("private_key_jwt needs privateKey, kid and alg");
    } else if (!o.clientSecret) {
      throw new TypeError("clientSecret is required (or authMethod private_key_jwt with a private key)");
    }
  }

  /** A valid bearer token, fetched only when none is cached or the cached one is about to expire. */
  async get(): Promise<string> {
    if (this.token && this.now() < this.token.renewAt) return this.token.value;
    this.pending ??= this.request().finally(() => (this.pending = undefined));
    return this.pending;
  }

  /** Drops the cached token (after a 401, say); the next get() fetches a new one. */
  invalidate(): void {
    this.token = undefined;
  }

  /** A fresh client assertion: iss = sub = the client id, aud the token endpoint, a new jti, two minutes of life (at most five are accepted). */
  async clientAssertion(): Promise<string> {
    const { privateKey, alg, kid, clientId } = this.o;
    this.signingKey ??= Promise.resolve(
      typeof privateKey === "string"
        ? importPKCS8(privateKey, alg!)
        : privateKey !== undefined && "kty" in privateKey
          ? importJWK(privateKey as JWK, alg)
          : (privateKey as CryptoKey | KeyObject),
    );
    const now = Math.floor(this.now() / 1000);
    return new SignJWT({})
      .setProtectedHeader({ alg: alg!, kid: kid!, typ: "JWT" })
      .setIssuer(clientId)
      .setSubject(clientId)
      .setAudience(this.o.tokenEndpointUrl ?? new URL("/oauth/token", this.o.baseUrl).href)
      .setJti(globalThis.crypto.randomUUID())
      .setIssuedAt(now)
      .setExpirationTime(now + 120)
      .sign(await this.signingKey);
  }

  private async request(): Promise<string> {
    const method = this.o.authMethod ?? "basic";
    const form = new URLSearchParams({ grant_type: "client_credentials" });
    if (method === "body") {
      form.set("client_id", this.o.clientId);
      form.set("client_secret", this.o.clientSecret!);
    } else if (method === "private_key_jwt") {
      form.set("client_assertion_type", CLIENT_ASSERTION_TYPE);
      form.set("client_assertion", await this.clientAssertion());
    }
    if (this.o.scope) form.set("scope", this.o.scope);
    const headers: Record<string, string> = {
      "content-type": "application/x-www-form-urlencoded",
      accept: "application/json",
    };
    if (method === "basic") headers.authorization = basicCredentials(this.o.clientId, this.o.clientSecret!);
    let res: Response;
    try {
      res = await this.fetch(new URL("/oauth/token", this.o.baseUrl), {
        method: "POST",
        headers,
        body: form.toString(),
      });
    } catch (err) {
      throw new NetworkError(err);
    }
    const body = (await res.json().catch(() => undefined)) as Record<string, unknown> | undefined;
    if (res.status === 200 && body) {
      const token = body as unknown as TokenResponse;
      const renewBefore = Math.min(this.o.renewBeforeSeconds ?? 60, token.expires_in / 2);
      this.token = { value: token.access_token, renewAt: this.now() + (token.expires_in - renewBefore) * 1000 };
      return token.access_token;
    }
    if (typeof body?.error === "string")
      throw new OAuthTokenError(
        res.status,
        body.error as OAuthTokenError["code"],
        body.error_description as string | undefined,
      );
    const e = (body?.error ?? {}) as { code?: string; message?: string; type?: string };
    throw new PartnerApiError(
      res.status,
      (e.code ?? "internal_error") as ErrorCode,
      e.message ?? `token request failed with ${res.status}`,
      e.type ?? "api_error",
    );
  }
}
