import { openRuntime, startConnectServer, type Logger, type RunningService, type Settings } from "@pi/common";
import { loadSigningKeys } from "./keys.js";
import routes from "./routes.js";
import { openAuthStore } from "./store.js";

export async function startAuthService(settings: Settings, logger: Logger): Promise<RunningService> {
  const pepper = settings.CREDENTIAL_PEPPER;
  if (!pepper) throw new Error("invalid setting CREDENTIAL_PEPPER: required by the auth service");
  const runtime = await openRuntime("auth", settings, logger);
  const store = await openAuthStore(runtime.mongo.db);
  const keys = await loadSigningKeys(store.keysets, pepper);
  const server = await startConnectServer({
    host: settings.SERVICE_HOST,
    port: settings.AUTH_SERVICE_PORT,
    routes: routes({ store, keys, settings, pepper, producer: runtime.producer, logger }),
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
