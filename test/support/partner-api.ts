import { execFile } from "node:child_process";
import { join } from "node:path";
import { clientsFor } from "@pi/common/rpc/clients";
import type { Settings } from "@pi/common/runtime/settings";
import { commands } from "../../services/ops/src/commands.js";
import { validateResponse } from "./openapi.js";

// What a partner and an operator do, for tests that drive a running stack.

export function opsFor(settings: Settings) {
  const c = clientsFor(settings);
  return commands({ auth: c.authAdmin(), connection: c.connectionAdmin(), webhook: c.webhookAdmin() });
}

export async function requestToken(
  baseUrl: string,
  body: Record<string, string>,
  encoding: "form" | "json" = "form",
  headers: Record<string, string> = {},
) {
  const res = await fetch(`${baseUrl}/oauth/token`, {
    method: "POST",
    headers: {
      "content-type": encoding === "form" ? "application/x-www-form-urlencoded" : "application/json",
      ...headers,
    },
    body: encoding === "form" ? new URLSearchParams(body).toString() : JSON.stringify(body),
  });
  const text = await res.text();
  validateResponse("POST", "/oauth/token", res.status, res.headers, text);
  return { status: res.status, headers: res.headers, text };
}

/** RFC 6749 section 2.3.1: the id and the secret each form-urlencoded, joined by a colon, base64-encoded. */
export function basicAuthorization(clientId: string, clientSecret: string): string {
  const enc = (v: string) => new URLSearchParams({ v }).toString().slice(2);
  return `Basic ${Buffer.from(`${enc(clientId)}:${enc(clientSecret)}`).toString("base64")}`;
}

export async function accessToken(
  baseUrl: string,
  clientId: string,
  clientSecret: string,
  scope?: string,
): Promise<string> {
  const res = await requestToken(baseUrl, {
    grant_type: "client_credentials",
    client_id: clientId,
    client_secret: clientSecret,
    ...(scope ? { scope } : {}),
  });
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
  return {
    status: res.status,
    headers: res.headers,
    text,
    json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined,
  };
}

/** The environment that points the compiled operator CLI at a stack's internal services. */
export function opsCliEnv(settings: Settings): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    AUTH_SERVICE_URL: settings.AUTH_SERVICE_URL,
    CONNECTION_SERVICE_URL: settings.CONNECTION_SERVICE_URL,
    FILE_INTAKE_SERVICE_URL: settings.FILE_INTAKE_SERVICE_URL,
    WEBHOOK_SERVICE_URL: settings.WEBHOOK_SERVICE_URL,
    AUTH_ADMIN_URL: settings.AUTH_ADMIN_URL,
    CONNECTION_ADMIN_URL: settings.CONNECTION_ADMIN_URL,
    WEBHOOK_ADMIN_URL: settings.WEBHOOK_ADMIN_URL,
    ADDRESS_DOMAIN: settings.ADDRESS_DOMAIN,
    SERVICE_IDENTITY_KEY: settings.SERVICE_IDENTITY_KEY,
  };
}

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs the compiled operator CLI as `npm run ops` does (deploy/local/dist/ops.js: unset addresses and
 * its key from STATE_DIR). Asynchronous on purpose: the services answering it may run in this very process.
 */
export function runOpsCli(
  env: NodeJS.ProcessEnv,
  args: string[],
  command: string[] = [process.execPath, join(process.cwd(), "deploy", "local", "dist", "ops.js")],
): Promise<CliRun> {
  const started = performance.now();
  const [file, ...prefix] = command;
  return new Promise((resolve) => {
    execFile(file!, [...prefix, ...args], { env, timeout: 20_000 }, (err, stdout, stderr) => {
      resolve({
        code: err ? ((err as { code?: number }).code ?? 1) : 0,
        stdout,
        stderr,
        ms: performance.now() - started,
      });
    });
  });
}

/** The status of POST /v1/connections for `elder` with `token` (the body is read and dropped). */
export async function connectionRequestStatus(baseUrl: string, token: string, elder: string): Promise<number> {
  const res = await fetch(`${baseUrl}/v1/connections`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ elder }),
  });
  await res.arrayBuffer();
  return res.status;
}
