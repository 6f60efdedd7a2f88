import { clientsFor } from "@pi/common/rpc/clients";
import { readAtScrape, webhookFailingEndpoints, webhookOldestPendingAge } from "@pi/common/runtime/metrics";
import { openRuntime } from "@pi/common/runtime/runtime";
import { startRpcServer } from "@pi/common/rpc/server";
import type { Logger } from "@pi/common/runtime/logger";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { consumeConnectionEvents } from "./consumer.js";
import { Dispatcher } from "./dispatcher.js";
import { failingAfterMs } from "./endpoint-health.js";
import { refreshWebhookGauges } from "./gauges.js";
import type { Resolver } from "@pi/common/runtime/egress";
import { WebhookSender } from "./outbound.js";
import { startRetentionSweep } from "./retention.js";
import routes from "./routes.js";
import { openWebhookStore } from "./store.js";

export interface WebhookServiceOptions {
  /** Stands in for the system's DNS (tests of the outbound address check). */
  resolve?: Resolver;
}

export async function startWebhookService(
  settings: Settings,
  logger: Logger,
  options: WebhookServiceOptions = {},
): Promise<RunningService> {
  const runtime = await openRuntime("webhook", settings, logger);
  const store = await openWebhookStore(runtime.mongo.db);
  const trail = runtime.auditTrail("webhook");
  const eventsAudit = trail.on(store.events);
  await trail.start();
  const sender = new WebhookSender({
    allowInsecure: settings.WEBHOOK_ALLOW_INSECURE_URLS,
    timeoutMs: settings.WEBHOOK_ATTEMPT_TIMEOUT_SECONDS * 1000,
    resolve: options.resolve,
  });
  const dispatcher = new Dispatcher({
    store,
    auth: clientsFor(settings).authAdmin(),
    sender,
    logger: logger.child({ component: "dispatcher" }),
    policy: {
      baseSeconds: settings.WEBHOOK_RETRY_BASE_SECONDS,
      windowSeconds: settings.WEBHOOK_RETRY_WINDOW_SECONDS,
      attemptTimeoutSeconds: settings.WEBHOOK_ATTEMPT_TIMEOUT_SECONDS,
    },
  });
  dispatcher.start();
  const gauges = readAtScrape(
    [webhookOldestPendingAge, webhookFailingEndpoints],
    () => refreshWebhookGauges(store, failingAfterMs(settings.WEBHOOK_RETRY_WINDOW_SECONDS)),
    logger,
  );
  const retention = startRetentionSweep(
    store,
    {
      keepMs: settings.WEBHOOK_EVENT_RETENTION_SECONDS * 1000,
      testPerPartner: settings.WEBHOOK_TEST_EVENTS_PER_PARTNER,
    },
    logger.child({ component: "retention" }),
  );
  const consumer = await consumeConnectionEvents(store, runtime.kafka, settings.DATA_NAMESPACE, logger, () =>
    dispatcher.poke(),
  );
  const server = await startRpcServer({
    service: "webhook",
    publicKeys: settings.SERVICE_IDENTITY_PUBLIC_KEYS,
    host: settings.SERVICE_HOST,
    port: settings.WEBHOOK_SERVICE_PORT,
    adminPort: settings.WEBHOOK_ADMIN_PORT,
    routes: routes({ settings, logger, store, poke: () => dispatcher.poke(), trail, eventsAudit }),
    healthy: async (withKafka) => consumer.alive() && (await runtime.healthy(withKafka)),
    logger,
  });
  return {
    port: server.port,
    adminPort: server.adminPort,
    async stop() {
      await server.close();
      await Promise.allSettled([consumer.stop(), gauges.stop(), retention.stop()]);
      await dispatcher.stop(3_000, () => sender.agent.destroy());
      await sender.agent.close().catch(() => {});
      await trail.stop();
      await runtime.close();
    },
  };
}
