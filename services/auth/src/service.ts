import { connectMongo } from "@pi/common/store/mongo";
import { dataKeysOf, openRuntime } from "@pi/common/runtime/runtime";
import { parsePublicKeys } from "@pi/common/rpc/service-identity";
import { every } from "@pi/common/background/periodic";
import { followPartnerEvents, type PartnerEventFeed } from "@pi/common/events/partner-event-feed";
import { SettingsError, type Settings } from "@pi/common/runtime/settings";
import { startRpcServer } from "@pi/common/rpc/server";
import { topicName } from "@pi/common/events/topics";
import { whileHolding, type JobLeaseDoc } from "@pi/common/background/lease";
import type { Logger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import { AssertionKeys, jwksUrlCredentials, recordJwksFetch } from "./assertion-keys.js";
import { eventsv1 } from "@pi/proto";
import {
  AUDIT_SWEEP_EVERY_MS,
  AUDIT_SWEEP_LEASE,
  auditDatabaseName,
  auditRetentionCutoff,
  consumeAuditRecords,
  expireAuditRecords,
  openAuditStore,
} from "./audit.js";
import { AuthenticationCache } from "./authentication-cache.js";
import { KeyRing } from "./keys.js";
import { PartnerEventPublisher } from "./propagation.js";
import { resealStoredSecrets } from "./reseal.js";
import routes from "./routes.js";
import { peppersOf, SecretSealer } from "./secrets.js";
import { openAuthStore, sweepUsedAssertions } from "./store.js";
import { JWKS_URL_REFRESH_EVERY_MS } from "./jwks-refresh.js";

export interface AuthServiceOptions {
  /** Awaited before each partner event is applied: a test holds it to play a replica whose consumer is stuck. */
  beforePartnerEvent?: () => Promise<void>;
  /** The least time between two fetches of a private_key_jwt credential's JWK Set URL: a test shortens the 30 s so as not to wait it out. */
  jwksUrlRefetchCooldownMs?: number;
}

export async function startAuthService(
  settings: Settings,
  logger: Logger,
  options: AuthServiceOptions = {},
): Promise<RunningService> {
  const peppers = peppersOf(settings);
  if (!peppers) throw new SettingsError("invalid setting CREDENTIAL_PEPPER: required by the auth service");
  const dataKeys = dataKeysOf(settings, "auth");
  const sealer = new SecretSealer(dataKeys);
  // Set: requireIdentity checked it at start (runService).
  const servicePublicKeys = parsePublicKeys(settings.SERVICE_IDENTITY_PUBLIC_KEYS!);
  const runtime = await openRuntime("auth", settings, logger, dataKeys);
  const store = await openAuthStore(runtime.mongo.db, sealer);
  // Values sealed by a KEK since rotated out of first place.
  await resealStoredSecrets(store, sealer, logger);
  const auditDb = auditDatabaseName(settings.DATA_NAMESPACE);
  // Records of changes made here go out like everyone's (audit-events); this service also keeps the trail.
  const trail = runtime.auditTrail("auth");
  const events = new PartnerEventPublisher(
    store,
    trail,
    runtime.producer,
    runtime.kafka,
    topicName(settings.DATA_NAMESPACE, "partnerEvents"),
    logger,
  );
  const audit = {
    trail,
    store: await openAuditStore(runtime.mongo.client.db(auditDb)),
    publicKeys: servicePublicKeys,
  };
  // The retention sweep's own database user when set (the service's own user cannot remove a record).
  const retentionMongo = settings.AUDIT_RETENTION_MONGODB_URI
    ? await connectMongo(settings.AUDIT_RETENTION_MONGODB_URI, auditDb)
    : undefined;
  const keys = new KeyRing(store.signingKeys, sealer, trail, store.revokedKeys);
  await trail.start();
  await keys.load();
  // Picks up keys that another replica rotated in, before they start signing (docs/authentication.md).
  const reload = every(
    "refreshing the token signing keys",
    settings.JWKS_REFRESH_SECONDS * 1000,
    () => keys.load(),
    logger,
    { runAtStart: false },
  );
  // Publishes at start what a crash left in an outbox, then sweeps every few seconds.
  await events.start();
  let feed: PartnerEventFeed | undefined;
  const authentications = new AuthenticationCache(() => feed?.trusted() === true);
  // Every replica follows the partner events, as gateways do: an operator's change empties the cache
  // of authentications on every replica before the command returns.
  feed = await followPartnerEvents({
    kafka: runtime.kafka,
    namespace: settings.DATA_NAMESPACE,
    service: "auth",
    logger,
    async apply(event) {
      await options.beforePartnerEvent?.();
      authentications.clear();
      // A revoked key stops signing on this replica before its position passes the event.
      if (event.kind === eventsv1.PartnerEventKind.SIGNING_KEY_REVOKED) await keys.load();
    },
    sendPosition: (instanceId) => (nextOffsets, leaving) => events.report(instanceId, "auth", nextOffsets, leaving),
  });
  const leases = runtime.mongo.db.collection<JobLeaseDoc>("job_leases");
  // One replica at a time.
  const leased = (name: string, everyMs: number, lease: string, task: () => Promise<unknown>) =>
    every(name, everyMs, () => whileHolding(leases, lease, 5 * 60_000, task), logger);
  const assertionKeys = new AssertionKeys({
    allowInsecure: settings.WEBHOOK_ALLOW_INSECURE_URLS,
    refetchCooldownMs: options.jwksUrlRefetchCooldownMs,
    record: (url, outcome) => recordJwksFetch(store.credentials, url, outcome),
    logger,
  });
  await assertionKeys.start();
  // JWK Set URLs are fetched here, never on a token request: sets past their age.
  const jwksRefresh = leased("refresh JWK Set URLs", JWKS_URL_REFRESH_EVERY_MS, "jwks-url-refresh", async () =>
    assertionKeys.refreshDue(await jwksUrlCredentials(store.credentials)),
  );
  // A used jti is kept until its assertion's exp (at most five minutes); no TTL index on every server.
  const sweep = every("sweep used assertions", 60_000, () => sweepUsedAssertions(store), logger);
  // Audit records are stored only when signed by the service that owns their kind.
  const auditConsumer = await consumeAuditRecords(
    audit.store,
    runtime.kafka,
    settings.DATA_NAMESPACE,
    servicePublicKeys,
    logger,
  );
  // Records past AUDIT_RETENTION_SECONDS go (docs/security.md, "Audit trail").
  const auditRetentionSweep = leased("audit retention sweep", AUDIT_SWEEP_EVERY_MS, AUDIT_SWEEP_LEASE, async () => {
    const cutoff = auditRetentionCutoff(new Date(), settings.AUDIT_RETENTION_SECONDS);
    const deleted = await expireAuditRecords(retentionMongo?.db ?? runtime.mongo.client.db(auditDb), cutoff);
    if (deleted > 0) logger.info({ deleted }, "audit records past retention deleted");
  });
  const server = await startRpcServer({
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
      await Promise.all([reload, sweep, jwksRefresh, auditRetentionSweep].map((p) => p.stop()));
      await retentionMongo?.close();
      await server.close();
      await Promise.all([feed?.stop(), auditConsumer.stop()]);
      await Promise.all([events.stop(), trail.stop()]);
      await assertionKeys.stop();
      await runtime.close();
    },
  };
}
