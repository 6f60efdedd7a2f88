import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { clientsFor, createKafka, type Logger, type RunningService, type Settings } from "@pi/common";
import { createApp } from "./app.js";
import { BearerVerifier, RevocationList } from "./bearer.js";
import { followRevocations } from "./revocation-feed.js";

async function retry<T>(what: string, logger: Logger, attempt: () => Promise<T>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await attempt();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      logger.warn({ err: (err as Error).message }, `${what} failed; retrying`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

export async function startGateway(settings: Settings, logger: Logger): Promise<RunningService> {
  const clients = clientsFor(settings);
  const auth = clients.auth();
  const verifier = new BearerVerifier(auth, new RevocationList());
  const kafka = createKafka(settings.KAFKA_BROKERS, `${settings.DATA_NAMESPACE}.gateway`, logger);
  const revocations = await retry("following revocations", logger, () =>
    followRevocations(verifier.revocations, auth, kafka, settings.DATA_NAMESPACE, logger),
  );
  await retry("loading token keys", logger, () => verifier.refreshKeys());
  // A rotated-in key is published this often before it starts signing (docs/authentication.md).
  const keyRefresh = setInterval(() => {
    verifier.refreshKeys().catch((err: unknown) => logger.warn({ err: (err as Error).message }, "refreshing the token keys failed"));
  }, settings.JWKS_REFRESH_SECONDS * 1000);
  keyRefresh.unref();

  const app = createApp({
    settings,
    logger,
    auth,
    connections: clients.connection(),
    files: clients.fileIntake(),
    verifier,
    health: {
      auth: clients.health(settings.AUTH_SERVICE_URL),
      connection: clients.health(settings.CONNECTION_SERVICE_URL),
      "file-intake": clients.health(settings.FILE_INTAKE_SERVICE_URL),
      webhook: clients.health(settings.WEBHOOK_SERVICE_URL),
    },
  });
  const server: Server = createServer(app.callback());
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(settings.GATEWAY_PORT, settings.GATEWAY_HOST, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  logger.info({ port }, "gateway listening");
  return {
    port,
    async stop() {
      clearInterval(keyRefresh);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      await revocations.stop();
    },
  };
}
