import { NetworkError, OAuthTokenError, PartnerApiError, type ErrorCode } from "./errors.js";
import type { components } from "./gen/api.js";

type TokenResponse = components["schemas"]["TokenResponse"];

export interface TokenSourceOptions {
  baseUrl: string;
  clientId: string;
  clientSecret: string;
  /** How the client authenticates at POST /oauth/token: an HTTP Basic header (default) or the body fields. */
  authMethod?: "basic" | "body";
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

  constructor(private readonly o: TokenSourceOptions) {
    this.fetch = o.fetch ?? globalThis.fetch;
    this.now = o.now ?? Date.now;
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

  private async request(): Promise<string> {
    const basic = (this.o.authMethod ?? "basic") === "basic";
    const form = new URLSearchParams({ grant_type: "client_credentials" });
    if (!basic) {
      form.set("client_id", this.o.clientId);
      form.set("client_secret", this.o.clientSecret);
    }
    if (this.o.scope) form.set("scope", this.o.scope);
    const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded", accept: "application/json" };
    if (basic) headers.authorization = basicCredentials(this.o.clientId, this.o.clientSecret);
    let res: Response;
    try {
      res = await this.fetch(new URL("/oauth/token", this.o.baseUrl), { method: "POST", headers, body: form.toString() });
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
    if (typeof body?.error === "string") throw new OAuthTokenError(res.status, body.error as OAuthTokenError["code"], body.error_description as string | undefined);
    const e = (body?.error ?? {}) as { code?: string; message?: string; type?: string };
    throw new PartnerApiError(res.status, (e.code ?? "internal_error") as ErrorCode, e.message ?? `token request failed with ${res.status}`, e.type ?? "api_error");
  }
}
