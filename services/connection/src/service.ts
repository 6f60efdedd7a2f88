import { openRuntime, sandboxElderAddress, startConnectServer, type Logger, type RunningService, type Settings } from "@pi/common";
import routes from "./routes.js";
import { openConnectionStore, type ConnectionStore } from "./store.js";

/** The sandbox elder exists in every deployment; creating it is idempotent. */
async function ensureSandboxElder(store: ConnectionStore, address: string): Promise<void> {
  await store.elders.updateOne(
    { address },
    { $setOnInsert: { _id: "eld_sandbox", address, createdAt: new Date() } },
    { upsert: true },
  );
}

export async function startConnectionService(settings: Settings, logger: Logger): Promise<RunningService> {
  const runtime = await openRuntime("connection", settings, logger);
  const store = await openConnectionStore(runtime.mongo.db);
  await ensureSandboxElder(store, sandboxElderAddress(settings.ADDRESS_DOMAIN));
  const server = await startConnectServer({
    host: settings.SERVICE_HOST,
    port: settings.CONNECTION_SERVICE_PORT,
    routes: routes({ store, settings, logger }),
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
