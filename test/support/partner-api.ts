import { clientsFor, type Settings } from "@pi/common";
import { commands } from "../../services/ops/src/commands.js";
import { validateResponse } from "./openapi.js";

// What a partner and an operator do, for tests that drive a running stack.

export function opsFor(settings: Settings) {
  const c = clientsFor(settings);
  return commands({ auth: c.auth(), connection: c.connection(), webhook: c.webhook() });
}

export async function requestToken(baseUrl: string, body: Record<string, string>, encoding: "form" | "json" = "form") {
  const res = await fetch(`${baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": encoding === "form" ? "application/x-www-form-urlencoded" : "application/json" },
    body: encoding === "form" ? new URLSearchParams(body).toString() : JSON.stringify(body),
  });
  const text = await res.text();
  validateResponse("POST", "/oauth/token", res.status, res.headers, text);
  return { status: res.status, headers: res.headers, text };
}

export async function accessToken(baseUrl: string, clientId: string, clientSecret: string, scope?: string): Promise<string> {
  const res = await requestToken(baseUrl, { grant_type: "client_credentials", client_id: clientId, client_secret: clientSecret, ...(scope ? { scope } : {}) });
  if (res.status !== 200) throw new Error(`token request failed: ${res.status} ${res.text}`);
  return (JSON.parse(res.text) as { access_token: string }).access_token;
}

export async function call(baseUrl: string, token: string | undefined, method: string, path: string, body?: unknown) {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  validateResponse(method, path, res.status, res.headers, text);
  return { status: res.status, headers: res.headers, text, json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
}
