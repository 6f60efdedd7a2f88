import { AuditTrail, checkDataKeys, dataKeysOf, every, followPartnerEvents, openRuntime, SettingsError, startConnectServer, topicName, type Logger, type PartnerEventFeed, type RunningService, type Settings } from "@pi/common";
import { AssertionKeys } from "./assertion-keys.js";
import { consumeAuditRecords, openAuditStore } from "./audit.js";
import { AuthenticationCache } from "./authentication-cache.js";
import { KeyRing } from "./keys.js";
import { FOLLOWER_LIVENESS_MS, PartnerEventPublisher } from "./propagation.js";
import { resealStoredSecrets } from "./reseal.js";
import routes from "./routes.js";
import { FIRST_PEPPER_ID, peppersOf, SecretSealer } from "./secrets.js";
import { openAuthStore, sweepUsedAssertions } from "./store.js";

/**
 * How fresh this replica's last stored position must be for its authentication cache to be used.
 * Half the liveness window: well before the other replicas stop waiting for this one (clocks may
 * differ by a little), it stops serving from a cache that an operator change might not reach.
 */
export const CACHE_TRUST_MS = FOLLOWER_LIVENESS_MS / 2;

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
  // Records of changes made here go out like everyone's (audit-events); this service also keeps the trail.
  const trail = new AuditTrail({ service: "auth", db: runtime.mongo.db, producer: runtime.producer, topic: topicName(settings.DATA_NAMESPACE, "auditEvents"), logger });
  const audit = {
    trail,
    partners: trail.on(store.partners),
    credentials: trail.on(store.credentials),
    keys: trail.on(store.signingKeys),
    store: await openAuditStore(runtime.mongo.db),
  };
  await trail.start();
  const keys = new KeyRing(store.signingKeys, sealer, { entry: (f) => trail.entry(f), afterWrite: (id) => audit.keys.afterWrite(id) });
  await keys.load();
  // Picks up keys that another replica rotated in, before they start signing.
  const reload = setInterval(() => {
    keys.load().catch((err: unknown) => logger.warn({ err: (err as Error).message }, "reloading the signing keys failed"));
  }, settings.JWKS_REFRESH_SECONDS * 1000);
  reload.unref();
  const events = new PartnerEventPublisher(store, runtime.producer, topicName(settings.DATA_NAMESPACE, "partnerEvents"), logger);
  // Publishes at start what a crash left in an outbox, then sweeps every few seconds.
  await events.start();
  let feed: PartnerEventFeed | undefined;
  const authentications = new AuthenticationCache({
    trusted: () => feed !== undefined && feed.alive() && (feed.reporter?.sinceLastReportMs() ?? Infinity) < CACHE_TRUST_MS,
  });
  // Every replica follows the partner events, as gateways do, so that an operator change drops the
  // cached authentications it affects on every replica before the command returns.
  feed = await followPartnerEvents({
    kafka: runtime.kafka,
    namespace: settings.DATA_NAMESPACE,
    service: "auth",
    logger,
    apply: (event) => authentications.apply(event),
    sendPosition: (instanceId) => (nextOffsets, leaving) => events.report(instanceId, "auth", nextOffsets, leaving),
  });
  const assertionKeys = new AssertionKeys({ allowInsecure: settings.WEBHOOK_ALLOW_INSECURE_URLS });
  await assertionKeys.start();
  // A used jti is kept until its assertion's exp (at most five minutes); no TTL index on every server.
  const sweep = every("sweep used assertions", 60_000, () => sweepUsedAssertions(store), logger);
  const auditConsumer = await consumeAuditRecords(audit.store, runtime.kafka, settings.DATA_NAMESPACE, logger);
  const server = await startConnectServer({
    service: "auth",
    publicKeys: settings.SERVICE_IDENTITY_PUBLIC_KEYS,
    host: settings.SERVICE_HOST,
    port: settings.AUTH_SERVICE_PORT,
    adminPort: settings.AUTH_ADMIN_PORT,
    routes: routes({ store, keys, settings, peppers, sealer, events, authentications, assertionKeys, audit, logger }),
    healthy: async (withKafka) => auditConsumer.alive() && (await runtime.healthy(withKafka)),
    logger,
  });
  return {
    port: server.port,
    adminPort: server.adminPort,
    async stop() {
      clearInterval(reload);
      await sweep.stop();
      await server.close();
      await Promise.all([feed?.stop(), auditConsumer.stop()]);
      await Promise.all([events.stop(), trail.stop()]);
      await runtime.close();
    },
  };
}
