// Client authentication at the token endpoint: HTTP Basic or body fields (RFC 6749 section 2.3.1),
// or a client assertion (private_key_jwt, RFC 7523 section 2.2). One method per request.

export interface ClientCredentials {
  /** With an assertion: the body's client_id, or "" (the assertion names the client). */
  clientId: string;
  clientSecret: string;
  /** private_key_jwt: the compact JWS, checked by the auth service alone. */
  assertion?: string;
}

export type ClientAuthMethod = "basic" | "body" | "private_key_jwt";
export type ClientAuthResult = { ok: true; method: ClientAuthMethod; credentials: ClientCredentials } | { ok: false };

export const CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/** An assertion longer than this is not a request we read (invalid_request, as an oversized secret is). */
export const MAX_CLIENT_ASSERTION_LENGTH = 8192;

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

/** Which method the request authenticates with; not ok (invalid_request) for none, two, or a malformed one. */
export function clientAuthentication(
  authorization: string | undefined,
  body: { client_id?: string; client_secret?: string; client_assertion_type?: string; client_assertion?: string },
): ClientAuthResult {
  if (body.client_assertion_type !== undefined || body.client_assertion !== undefined) {
    // Both fields, the one type, and no second method (RFC 7521 section 4.2; RFC 6749 section 2.3).
    if (body.client_assertion_type !== CLIENT_ASSERTION_TYPE || !body.client_assertion) return { ok: false };
    if (authorization !== undefined || body.client_secret !== undefined) return { ok: false };
    if (body.client_assertion.length > MAX_CLIENT_ASSERTION_LENGTH) return { ok: false };
    return {
      ok: true,
      method: "private_key_jwt",
      credentials: { clientId: body.client_id ?? "", clientSecret: "", assertion: body.client_assertion },
    };
  }
  if (authorization === undefined) {
    if (!body.client_id || !body.client_secret) return { ok: false };
    return { ok: true, method: "body", credentials: { clientId: body.client_id, clientSecret: body.client_secret } };
  }
  const basic = parseBasicAuthorization(authorization);
  if (!basic) return { ok: false };
  if (body.client_secret !== undefined) return { ok: false };
  // RFC 6749 lets a client repeat its id in the body; it must then be the same client.
  if (body.client_id !== undefined && body.client_id !== basic.clientId) return { ok: false };
  return { ok: true, method: "basic", credentials: basic };
}
