import { authv1, connectionv1, fileintakev1, healthv1, webhookv1 } from "@pi/proto";
import { serviceClient, type Client } from "./client.js";
import type { Settings } from "../runtime/settings.js";

export type AuthClient = Client<typeof authv1.AuthService>;
/** Requests one IssueTokens or GetConnections call may carry (the server refuses more; the gateway sends no more). */
export const MAX_REQUESTS_PER_BATCH = 64;
export type ConnectionClient = Client<typeof connectionv1.ConnectionService>;
export type FileIntakeClient = Client<typeof fileintakev1.FileIntakeService>;
export type WebhookClient = Client<typeof webhookv1.WebhookService>;
export type HealthClient = Client<typeof healthv1.Health>;

/**
 * Clients of the internal services, each call signed with the workload's SERVICE_IDENTITY_KEY: of
 * the data plane's ports (the runtime RPCs), and, `*Admin`, of the admin plane's (the admin RPCs;
 * rpc/server.ts serves each plane on its own port only).
 */
export const clientsFor = (s: Settings) => ({
  auth: (): AuthClient => serviceClient(authv1.AuthService, s.AUTH_SERVICE_URL, s.SERVICE_IDENTITY_KEY),
  connection: (): ConnectionClient =>
    serviceClient(connectionv1.ConnectionService, s.CONNECTION_SERVICE_URL, s.SERVICE_IDENTITY_KEY),
  fileIntake: (): FileIntakeClient =>
    serviceClient(fileintakev1.FileIntakeService, s.FILE_INTAKE_SERVICE_URL, s.SERVICE_IDENTITY_KEY),
  webhook: (): WebhookClient => serviceClient(webhookv1.WebhookService, s.WEBHOOK_SERVICE_URL, s.SERVICE_IDENTITY_KEY),
  authAdmin: (): AuthClient => serviceClient(authv1.AuthService, s.AUTH_ADMIN_URL, s.SERVICE_IDENTITY_KEY),
  connectionAdmin: (): ConnectionClient =>
    serviceClient(connectionv1.ConnectionService, s.CONNECTION_ADMIN_URL, s.SERVICE_IDENTITY_KEY),
  webhookAdmin: (): WebhookClient =>
    serviceClient(webhookv1.WebhookService, s.WEBHOOK_ADMIN_URL, s.SERVICE_IDENTITY_KEY),
  health: (urls: string): HealthClient => serviceClient(healthv1.Health, urls),
});
