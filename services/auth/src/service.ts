import { openRuntime, SettingsError, startConnectServer, topicName, type Logger, type RunningService, type Settings } from "@pi/common";
import { KeyRing } from "./keys.js";
import { PartnerEventPublisher } from "./propagation.js";
import routes from "./routes.js";
import { openAuthStore } from "./store.js";

export async function startAuthService(settings: Settings, logger: Logger): Promise<RunningService> {
  const pepper = settings.CREDENTIAL_PEPPER;
  if (!pepper) throw new SettingsError("invalid setting CREDENTIAL_PEPPER: required by the auth service");
  const runtime = await openRuntime("auth", settings, logger);
  const store = await openAuthStore(runtime.mongo.db, pepper);
  const keys = new KeyRing(store.signingKeys, pepper);
  await keys.load();
  // Picks up keys that another replica rotated in, before they start signing.
  const reload = setInterval(() => {
    keys.load().catch((err: unknown) => logger.warn({ err: (err as Error).message }, "reloading the signing keys failed"));
  }, settings.JWKS_REFRESH_SECONDS * 1000);
  reload.unref();
  const events = new PartnerEventPublisher(store, runtime.producer, topicName(settings.DATA_NAMESPACE, "partnerEvents"), logger);
  // Publishes at start what a crash left in an outbox, then sweeps every few seconds.
  await events.start();
  const server = await startConnectServer({
    host: settings.SERVICE_HOST,
    port: settings.AUTH_SERVICE_PORT,
    routes: routes({ store, keys, settings, pepper, events, logger }),
    healthy: runtime.healthy,
    logger,
  });
  return {
    port: server.port,
    async stop() {
      clearInterval(reload);
      await server.close();
      await events.stop();
      await runtime.close();
    },
  };
}
