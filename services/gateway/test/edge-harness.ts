import { createServer, request, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import type { ServiceImpl } from "@pi/common/rpc/server";
import { localClient } from "../../../test/support/local-client.js";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { authv1, connectionv1, fileintakev1, healthv1, webhookv1 } from "@pi/proto";
import { createLogger } from "@pi/common/runtime/logger";
import { parseSettings, type Settings } from "@pi/common/runtime/settings";
import { createApp } from "../src/app.js";
import { BearerVerifier, RevocationList } from "../src/bearer.js";

// The gateway app alone, on a real HTTP socket, with in-memory Connect stand-ins for the internal
// services (localClient: the errors a server sends, no network) and tokens signed here.
// Unit-level: what the edge does with requests, not what the services behind it do.

export type ConnectionImpl = Partial<ServiceImpl<typeof connectionv1.ConnectionService>>;
export type FileIntakeImpl = Partial<ServiceImpl<typeof fileintakev1.FileIntakeService>>;
export type AuthImpl = Partial<ServiceImpl<typeof authv1.AuthService>>;
export type WebhookImpl = Partial<ServiceImpl<typeof webhookv1.WebhookService>>;

export interface EdgeOptions {
  settings?: Record<string, string>;
  auth?: AuthImpl;
  connections?: ConnectionImpl;
  files?: FileIntakeImpl;
  webhooks?: WebhookImpl;
  /** The internal services' health checks (all SERVING by default). */
  health?: Partial<ServiceImpl<typeof healthv1.Health>>;
  /** Whether the gateway is warm (true by default). */
  warm?: () => boolean;
}

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  json: any;
}

export interface Edge {
  baseUrl: string;
  settings: Settings;
  /** Every JSON log line the gateway wrote. */
  logs: Record<string, unknown>[];
  token(partnerId: string, scopes?: string, mode?: "live" | "test"): Promise<string>;
  send(
    method: string,
    path: string,
    opts?: { headers?: Record<string, string>; body?: string | Buffer; localAddress?: string },
  ): Promise<Answer>;
  stop(): Promise<void>;
}

export const ISSUER = "pi-auth";
export const AUDIENCE = "partner-api";

export async function startEdge(opts: EdgeOptions = {}): Promise<Edge> {
  const settings = parseSettings({ LOG_LEVEL: "info", ...opts.settings });
  const { publicKey, privateKey } = await generateKeyPair("ES256", { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid: "k1", alg: "ES256", use: "sig" };
  const auth: AuthImpl = {
    getJwks: () => ({ jwksJson: JSON.stringify({ keys: [jwk] }), issuer: ISSUER, audience: AUDIENCE }),
    ...opts.auth,
  };
  const authClient = localClient(authv1.AuthService, auth);
  const logs: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split("\n").filter(Boolean))
        logs.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const app = createApp({
    settings,
    logger: createLogger("gateway", "info", sink),
    auth: authClient,
    connections: localClient(connectionv1.ConnectionService, opts.connections ?? {}),
    files: localClient(fileintakev1.FileIntakeService, opts.files ?? {}),
    webhooks: localClient(webhookv1.WebhookService, opts.webhooks ?? {}),
    verifier: new BearerVerifier(authClient, new RevocationList()),
    health: {
      auth: localClient(
        healthv1.Health,
        opts.health ?? { check: () => ({ status: healthv1.HealthCheckResponse_ServingStatus.SERVING }) },
      ),
    },
    ...(opts.warm ? { warm: opts.warm } : {}),
  });
  const server = createServer(app.callback());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let jti = 0;

  return {
    baseUrl,
    settings,
    logs,
    async token(partnerId, scopes = "connections:write files:write", mode = "live") {
      const now = Math.floor(Date.now() / 1000);
      return new SignJWT({ client_id: `cli_${partnerId}`, mode, scope: scopes })
        .setProtectedHeader({ alg: "ES256", kid: "k1", typ: "at+jwt" })
        .setSubject(partnerId)
        .setIssuer(ISSUER)
        .setAudience(AUDIENCE)
        .setJti(`tok_${++jti}`)
        .setIssuedAt(now)
        .setExpirationTime(now + 300)
        .sign(privateKey);
    },
    // node:http rather than fetch: any method, any header, and a chosen source address.
    send(method, path, { headers = {}, body, localAddress } = {}) {
      return new Promise<Answer>((resolve, reject) => {
        const req = request(`${baseUrl}${path}`, { method, headers, localAddress, agent: false }, (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            let json: unknown;
            try {
              json = text ? JSON.parse(text) : undefined;
            } catch {
              json = undefined;
            }
            resolve({ status: res.statusCode!, headers: res.headers, text, json });
          });
          res.on("error", reject);
        });
        req.on("error", reject);
        req.end(body);
      });
    },
    async stop() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
