import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { Code, ConnectError, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { healthv1 } from "@pi/proto";
import type { Logger } from "./logger.js";
import { tracingServerInterceptor } from "./telemetry.js";

const { Health, HealthCheckResponse_ServingStatus: ServingStatus } = healthv1;

export const LIVENESS = "liveness";

export interface ConnectServer {
  port: number;
  close(): Promise<void>;
}

export interface ConnectServerOptions {
  host: string;
  port: number;
  routes: (router: ConnectRouter) => void;
  /** Whether the service can reach everything it depends on (its database, Kafka). */
  healthy: () => Promise<boolean>;
  logger: Logger;
}

/** Logs every failed call that is not a deliberate service error, without the request itself. */
function loggingInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    try {
      return await next(req);
    } catch (err) {
      const ce = ConnectError.from(err);
      const fields = { method: req.method.name, code: Code[ce.code], ms: Math.round(performance.now() - started) };
      if (ce.code === Code.Internal || ce.code === Code.Unknown) logger.error({ ...fields, err }, "rpc failed");
      else logger.debug(fields, "rpc refused");
      throw err;
    }
  };
}

/** A Connect server over HTTP/2 cleartext that also serves grpc.health.v1.Health. */
export async function startConnectServer(opts: ConnectServerOptions): Promise<ConnectServer> {
  const handler = connectNodeAdapter({
    interceptors: [tracingServerInterceptor, loggingInterceptor(opts.logger)],
    routes: (router) => {
      opts.routes(router);
      router.service(Health, {
        // Service "liveness" answers whether the process serves at all (the liveness probe: a
        // database outage must not restart every pod); any other name, readiness: its database
        // and Kafka are reachable.
        async check(req) {
          if (req.service === LIVENESS) return { status: ServingStatus.SERVING };
          return { status: (await opts.healthy()) ? ServingStatus.SERVING : ServingStatus.NOT_SERVING };
        },
        // eslint-disable-next-line require-yield
        async *watch() {
          throw new ConnectError("watch is not served; poll Check", Code.Unimplemented);
        },
      });
    },
  });
  const server = http2.createServer(handler);
  const sessions = new Set<http2.Http2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  opts.logger.info({ port }, "connect server listening");
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sessions) s.close();
        setTimeout(() => {
          for (const s of sessions) s.destroy();
        }, 5000).unref();
      }),
  };
}
