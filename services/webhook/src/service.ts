import { openRuntime, startConnectServer, type Logger, type RunningService, type Settings } from "@pi/common";
import routes from "./routes.js";

export async function startWebhookService(settings: Settings, logger: Logger): Promise<RunningService> {
  const runtime = await openRuntime("webhook", settings, logger);
  const server = await startConnectServer({
    host: settings.SERVICE_HOST,
    port: settings.WEBHOOK_SERVICE_PORT,
    routes: routes({ settings, logger }),
    healthy: runtime.healthy,
    logger,
  });
  return {
    port: server.port,
    async stop() {
      await server.close();
      await runtime.close();
    },
  };
}
