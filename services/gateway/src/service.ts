import cluster from "node:cluster";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { clientsFor } from "@pi/common/rpc/clients";
import { serviceKafka } from "@pi/common/events/kafka";
import { retry } from "@pi/common/background/retry";
import type { Logger } from "@pi/common/runtime/logger";
import { every, type Periodic } from "@pi/common/background/periodic";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { createApp } from "./app.js";
import { envelope } from "./errors.js";
import { BearerVerifier, RevocationList } from "./bearer.js";
import { followRevocations } from "./revocation-feed.js";

export async function startGateway(settings: Settings, logger: Logger): Promise<RunningService> {
  const clients = clientsFor(settings);
  const auth = clients.auth();
  const verifier = new BearerVerifier(auth, new RevocationList());
  const kafka = serviceKafka(settings, "gateway", logger);
  // Listens at once (/readyz says 503) and warms up behind it: the revocation list and the token keys,
  // without which no bearer can be judged.
  const stopping = new AbortController();
  let warm = false;
  let revocations: { stop(): Promise<void> } | undefined;
  let keyRefresh: Periodic | undefined;
  // Retried until it succeeds or the gateway stops; an attempt under way still finishes, and stop() undoes it.
  const warmup = retry(
    "warming up (revocations, token keys)",
    async () => {
      if (stopping.signal.aborted) return;
      revocations ??= await followRevocations(verifier.revocations, auth, kafka, settings.DATA_NAMESPACE, logger);
      await verifier.refreshKeys();
      // A rotated-in key is published this often before it starts signing (docs/authentication.md).
      keyRefresh = every(
        "refreshing the token keys",
        settings.JWKS_REFRESH_SECONDS * 1000,
        () => verifier.refreshKeys(),
        logger,
        { runAtStart: false },
      );
      warm = true;
      logger.info("gateway warm: token keys and revocations loaded");
    },
    { attempts: Infinity, firstDelayMs: 250, maxDelayMs: 5_000, retryIf: () => !stopping.signal.aborted, logger },
  ).catch((err: unknown) => {
    if (!stopping.signal.aborted) throw err;
  });

  const app = createApp({
    settings,
    logger,
    auth,
    connections: clients.connection(),
    files: clients.fileIntake(),
    webhooks: clients.webhook(),
    verifier,
    warm: () => warm,
    health: {
      auth: clients.health(settings.AUTH_SERVICE_URL),
      connection: clients.health(settings.CONNECTION_SERVICE_URL),
      "file-intake": clients.health(settings.FILE_INTAKE_SERVICE_URL),
      webhook: clients.health(settings.WEBHOOK_SERVICE_URL),
    },
  });
  const server: Server = createServer(app.callback());
  // Above the proxies' idle timeouts (60 s; docs/security.md): the proxy ends an idle connection.
  server.keepAliveTimeout = 65_000;
  // Requests Node's HTTP parser refuses before Koa sees them still get the envelope.
  server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) return socket.destroy();
    const tooLarge = err.code === "HPE_HEADER_OVERFLOW";
    const body = JSON.stringify(
      envelope("invalid_request", tooLarge ? "The request headers are too large." : "The request is malformed."),
    );
    socket.end(
      `HTTP/1.1 ${tooLarge ? "431 Request Header Fields Too Large" : "400 Bad Request"}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
  // A node:cluster worker (`npm start`) shares the port with warm ones: it listens once warm, or it
  // would take their partners and answer 503.
  if (cluster.isWorker) await warmup;
  server.listen(settings.GATEWAY_PORT, settings.GATEWAY_HOST);
  await once(server, "listening");
  const port = (server.address() as AddressInfo).port;
  logger.info({ port }, "gateway listening");
  return {
    port,
    ready: warmup,
    async stop() {
      stopping.abort();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      await warmup;
      await keyRefresh?.stop();
      await revocations?.stop();
    },
  };
}

/** Starts a gateway and waits until it is warm (tests and benchmarks). */
export async function startWarmGateway(settings: Settings, logger: Logger): Promise<RunningService> {
  const gateway = await startGateway(settings, logger);
  await gateway.ready;
  return gateway;
}
