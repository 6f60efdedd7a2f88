import { checkDataKeys, dataKeysOf, openRuntime, SettingsError, startConnectServer, topicName, type Logger, type RunningService, type Settings } from "@pi/common";
import { KeyRing } from "./keys.js";
import { PartnerEventPublisher } from "./propagation.js";
import { resealStoredSecrets } from "./reseal.js";
import routes from "./routes.js";
import { FIRST_PEPPER_ID, peppersOf, SecretSealer } from "./secrets.js";
import { openAuthStore } from "./store.js";

export async function startAuthService(settings: Settings, logger: Logger): Promise<RunningService> {
  const peppers = peppersOf(settings);
  if (!peppers) throw new SettingsError("invalid setting CREDENTIAL_PEPPER: required by the auth service");
  const dataKeys = dataKeysOf(settings, "auth");
  const sealer = new SecretSealer(dataKeys, peppers.byId.get(FIRST_PEPPER_ID));
  const runtime = await openRuntime("auth", settings, logger);
  await checkDataKeys(dataKeys, runtime.mongo.db, logger).catch(async (err: unknown) => {
    await runtime.close();
    throw err;
  });
  const store = await openAuthStore(runtime.mongo.db, sealer);
  // Values sealed before DATA_KEYS (under the pepper), or by a KEK since rotated out of first place.
  await resealStoredSecrets(store, sealer, logger);
  const keys = new KeyRing(store.signingKeys, sealer);
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
    routes: routes({ store, keys, settings, peppers, sealer, events, logger }),
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
