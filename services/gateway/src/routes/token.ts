import { bodyParser } from "@koa/bodyparser";
import type { Context } from "koa";
import { authv1 } from "@pi/proto";
import { PartnerError } from "../errors.js";
import { tokenRateLimit } from "../rate-limit.js";
import type { IssueToken } from "../batches.js";
import { gatewayRouter } from "../router.js";

type OAuthError = "invalid_request" | "unsupported_grant_type" | "invalid_client" | "invalid_scope";

// Fixed descriptions: the body of a given error is the same bytes whatever caused it.
const descriptions: Record<OAuthError, string> = {
  invalid_request: "The request is missing a required parameter, repeats one, or is malformed.",
  unsupported_grant_type: "Only the client_credentials grant is supported.",
  invalid_client: "Client authentication failed.",
  invalid_scope: "The requested scope is invalid or exceeds the scope granted to the client.",
};

export function oauthError(error: OAuthError) {
  return { error, error_description: descriptions[error] };
}

/** Every refusal of the token endpoint's own: a 400 in the OAuth error shape (RFC 6749 section 5.2). */
function refuse(ctx: Context, error: OAuthError): void {
  ctx.status = 400;
  ctx.body = oauthError(error);
}

const fields = [
  "grant_type",
  "client_id",
  "client_secret",
  "scope",
  "client_assertion_type",
  "client_assertion",
] as const;
type TokenRequest = Partial<Record<(typeof fields)[number], string>>;

// Client authentication: HTTP Basic or body fields (RFC 6749 section 2.3.1), or a client assertion
// (private_key_jwt, RFC 7523 section 2.2). One method per request.

export interface ClientCredentials {
  /** With an assertion: the body's client_id, or "" (the assertion names the client). */
  clientId: string;
  clientSecret: string;
  /** private_key_jwt: the compact JWS, checked by the auth service alone. */
  assertion?: string;
}

const CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/** An assertion longer than this is not a request we read (invalid_request, as an oversized secret is). */
const MAX_CLIENT_ASSERTION_LENGTH = 8192;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** application/x-www-form-urlencoded decoding of one value; undefined when a %-escape is malformed. */
function formDecode(value: string): string | undefined {
  try {
    return decodeURIComponent(value.replace(/\+/g, " "));
  } catch {
    return undefined;
  }
}

/** Undefined for another scheme, bad base64, no colon, a malformed %-escape, or an empty id or secret. */
export function parseBasicAuthorization(header: string): ClientCredentials | undefined {
  const match = /^basic +(\S+) *$/i.exec(header);
  if (!match) return undefined;
  const encoded = match[1]!;
  if (encoded.length % 4 !== 0 || !BASE64.test(encoded)) return undefined;
  const decoded = Buffer.from(encoded, "base64");
  // Only UTF-8: a byte sequence that does not survive a round trip is not a form-encoded pair.
  const pair = decoded.toString("utf8");
  if (!Buffer.from(pair, "utf8").equals(decoded)) return undefined;
  const colon = pair.indexOf(":");
  if (colon < 0) return undefined;
  const clientId = formDecode(pair.slice(0, colon));
  const clientSecret = formDecode(pair.slice(colon + 1));
  if (!clientId || !clientSecret) return undefined;
  return { clientId, clientSecret };
}

/** The credentials the request authenticates with; undefined (invalid_request) for none, two, or a malformed one. */
function clientCredentials(authorization: string | undefined, req: TokenRequest): ClientCredentials | undefined {
  if (req.client_assertion_type !== undefined || req.client_assertion !== undefined) {
    // Both fields, the one type, and no second method (RFC 7521 section 4.2; RFC 6749 section 2.3).
    if (req.client_assertion_type !== CLIENT_ASSERTION_TYPE || !req.client_assertion) return undefined;
    if (authorization !== undefined || req.client_secret !== undefined) return undefined;
    if (req.client_assertion.length > MAX_CLIENT_ASSERTION_LENGTH) return undefined;
    return { clientId: req.client_id ?? "", clientSecret: "", assertion: req.client_assertion };
  }
  if (authorization === undefined) {
    if (!req.client_id || !req.client_secret) return undefined;
    return { clientId: req.client_id, clientSecret: req.client_secret };
  }
  const basic = parseBasicAuthorization(authorization);
  if (!basic || req.client_secret !== undefined) return undefined;
  // RFC 6749 lets a client repeat its id in the body; it must then be the same client.
  if (req.client_id !== undefined && req.client_id !== basic.clientId) return undefined;
  return basic;
}

/** RFC 6749 4.4 request validation: the error to answer, or the request. */
export function parseTokenRequest(
  body: unknown,
  authorization?: string,
): { ok: true; req: TokenRequest; client: ClientCredentials } | { ok: false; error: OAuthError } {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return { ok: false, error: "invalid_request" };
  const req: TokenRequest = {};
  for (const field of fields) {
    const value = (body as Record<string, unknown>)[field];
    if (value === undefined) continue;
    if (typeof value !== "string") return { ok: false, error: "invalid_request" };
    req[field] = value;
  }
  if (!req.grant_type) return { ok: false, error: "invalid_request" };
  if (req.grant_type !== "client_credentials") return { ok: false, error: "unsupported_grant_type" };
  const client = clientCredentials(authorization, req);
  if (!client || client.clientId.length > 256 || client.clientSecret.length > 512 || (req.scope?.length ?? 0) > 1024)
    return { ok: false, error: "invalid_request" };
  return { ok: true, req, client };
}

export default function tokenRoutes(issueToken: IssueToken, perMinute: number) {
  const router = gatewayRouter();
  router.post(
    "/oauth/token",
    tokenRateLimit(perMinute),
    async (ctx, next) => {
      // RFC 6749 section 5.1 and 5.2: never cached, success or failure.
      ctx.set("Cache-Control", "no-store");
      ctx.set("Pragma", "no-cache");
      // No-oracle guarantee 5: every invalid_client answer is the same bytes, headers included
      // (only Date differs), so no per-request header here; the request id stays in the logs.
      ctx.remove("X-Request-Id");
      if (!ctx.is("application/x-www-form-urlencoded", "application/json")) return refuse(ctx, "invalid_request");
      await next();
    },
    bodyParser({
      enableTypes: ["json", "form"],
      jsonLimit: "16kb",
      formLimit: "16kb",
      onError: (_err, ctx) => refuse(ctx, "invalid_request"),
    }),
    async (ctx) => {
      if (ctx.body !== undefined) return; // the body parser already answered
      const parsed = parseTokenRequest(ctx.request.body, ctx.headers.authorization);
      if (!parsed.ok) return refuse(ctx, parsed.error);
      // Basic or body: the same call, so every credential failure is the same work and the same
      // answer; an assertion is checked by auth alone, and fails with the same answer.
      const { clientId, clientSecret, assertion } = parsed.client;
      const res = await issueToken({
        clientId,
        clientSecret,
        scope: parsed.req.scope,
        ...(assertion !== undefined ? { clientAssertion: assertion } : {}),
      });
      if (res.outcome.case === "token") {
        const t = res.outcome.value;
        ctx.status = 200;
        ctx.body = {
          access_token: t.accessToken,
          token_type: "Bearer",
          expires_in: Number(t.expiresIn),
          scope: t.scope,
        };
        return;
      }
      // Auth could not read the credential (its database is away): the envelope 503, as for a failed call.
      if (res.outcome.value === authv1.TokenFailure.UNAVAILABLE)
        throw new PartnerError("service_unavailable", { headers: { "Retry-After": "1" } });
      refuse(ctx, res.outcome.value === authv1.TokenFailure.INVALID_SCOPE ? "invalid_scope" : "invalid_client");
    },
  );
  return router;
}
