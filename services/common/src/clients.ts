import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import { authv1, connectionv1, fileintakev1, healthv1, webhookv1 } from "@pi/proto";
import { BalancedTransport } from "./balanced-transport.js";
import type { Settings } from "./settings.js";
import { tracingClientInterceptor } from "./telemetry.js";

/** Every call between services carries a deadline, so a stuck service never hangs its caller. */
const defaultTimeoutMs = 10_000;

/**
 * A client of every replica of a service: `urls` is a `*_SERVICE_URL` value (one base URL or a
 * comma-separated list; host names stand for all their addresses). See balanced-transport.ts.
 */
export function serviceClient<T extends DescService>(service: T, urls: string, interceptors: Interceptor[] = []): Client<T> {
  return createClient(service, new BalancedTransport({ urls, interceptors: [tracingClientInterceptor, ...interceptors], defaultTimeoutMs }));
}

export type AuthClient = Client<typeof authv1.AuthService>;
export type ConnectionClient = Client<typeof connectionv1.ConnectionService>;
export type FileIntakeClient = Client<typeof fileintakev1.FileIntakeService>;
export type WebhookClient = Client<typeof webhookv1.WebhookService>;
export type HealthClient = Client<typeof healthv1.Health>;

export const clientsFor = (s: Settings) => ({
  auth: (): AuthClient => serviceClient(authv1.AuthService, s.AUTH_SERVICE_URL),
  connection: (): ConnectionClient => serviceClient(connectionv1.ConnectionService, s.CONNECTION_SERVICE_URL),
  fileIntake: (): FileIntakeClient => serviceClient(fileintakev1.FileIntakeService, s.FILE_INTAKE_SERVICE_URL),
  webhook: (): WebhookClient => serviceClient(webhookv1.WebhookService, s.WEBHOOK_SERVICE_URL),
  health: (urls: string): HealthClient => serviceClient(healthv1.Health, urls),
});
