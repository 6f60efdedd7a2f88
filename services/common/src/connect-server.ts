import type http2 from "node:http2";
import * as grpc from "@grpc/grpc-js";
import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { healthv1 } from "@pi/proto";
import { ruleFor, type Plane, type Workload } from "./allowed-callers.js";
import { collectRoutes, grpcHandlers, type MethodSpecs } from "./grpc-server.js";
import type { Logger } from "./logger.js";
import { identityServerInterceptor, publicKeysFor, TokenVerifier } from "./service-identity.js";
import { SettingsError } from "./settings.js";
import { tracingServerInterceptor } from "./telemetry.js";

const { Health, HealthCheckResponse_ServingStatus: ServingStatus } = healthv1;

/** Health check service names: the process serves (a pod's liveness probe)... */
export const LIVENESS = "liveness";
/** ...and the replica should take calls (a pod's readiness probe): its own parts and its database, not Kafka. */
export const TRAFFIC = "traffic";

export interface ConnectServer {
  port: number;
  /** The admin port's, when the service has one. */
  adminPort?: number;
  close(): Promise<void>;
}

export interface ConnectServerOptions {
  /** The service's name: the audience its callers' tokens must name. */
  service: Workload;
  /** SERVICE_IDENTITY_PUBLIC_KEYS: every workload's public key (service-identity.ts). */
  publicKeys: string | undefined;
  host: string;
  /** The data plane's port: the runtime RPCs and the health checks. */
  port: number;
  /** The admin plane's port (`*_ADMIN_PORT`): the service's admin RPCs, and nothing else. */
  adminPort?: number;
  routes: (router: ConnectRouter) => void;
  /**
   * Whether the service can reach everything it depends on (its database, Kafka); with `withKafka`
   * false, everything but Kafka (the health check TRAFFIC).
   */
  healthy: (withKafka: boolean) => Promise<boolean>;
  logger: Logger;
}

// Failures to reach the service's own database or Kafka: the call is answered Unavailable (a fast
// envelope 503 at the gateway), not Internal. Matched by name along the cause chain, as errors from
// the drivers may come from another realm (tests) or be wrapped; and by the code of a bare socket
// error, which the MongoDB driver lets through when it writes to a connection the server has just
// closed ("This socket has been ended by the other party", EPIPE: a 500 with the database killed).
const INFRASTRUCTURE_ERRORS =
  /^(Mongo)?(ServerSelection|Network|NetworkTimeout|NotConnected|TopologyClosed|PoolCleared|PoolClearedOnNetwork)Error$/;
// ...and by code: Node's socket errors, and @platformatic/kafka's network and timeout errors.
const ERROR_CODES = new Set([
  "EPIPE",
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "ETIMEDOUT",
  "ENOTCONN",
  "PLT_KFK_NETWORK",
  "PLT_KFK_TIMEOUT",
]);

export function infrastructureUnavailable(err: unknown): boolean {
  for (
    let e = err, depth = 0;
    typeof e === "object" && e !== null && depth < 8;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const name = (e as { name?: unknown }).name;
    if (typeof name === "string" && INFRASTRUCTURE_ERRORS.test(name)) return true;
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && ERROR_CODES.has(code)) return true;
    if (e instanceof AggregateError && e.errors.some(infrastructureUnavailable)) return true;
    if (
      (e as { originalError?: unknown }).originalError &&
      infrastructureUnavailable((e as { originalError?: unknown }).originalError)
    )
      return true;
  }
  return false;
}

/** Logs every failed call that is not a deliberate service error, without the request itself. */
function loggingInterceptor(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    try {
      return await next(req);
    } catch (thrown) {
      const err =
        !(thrown instanceof ConnectError) && infrastructureUnavailable(thrown)
          ? new ConnectError(
              "a dependency of the service is unreachable",
              Code.Unavailable,
              undefined,
              undefined,
              thrown,
            )
          : thrown;
      const ce = ConnectError.from(err);
      const fields = { method: req.method.name, code: Code[ce.code], ms: Math.round(performance.now() - started) };
      if (ce.code === Code.Internal || ce.code === Code.Unknown) logger.error({ ...fields, err }, "rpc failed");
      else if (ce.code === Code.Unavailable)
        logger.warn({ ...fields, err: (ce.cause as Error | undefined)?.message ?? ce.rawMessage }, "rpc unavailable");
      else logger.debug(fields, "rpc refused");
      throw err;
    }
  };
}

/**
 * HTTP/2 receive windows of the services' servers, above the protocol's 64 KiB defaults: a client
 * stream (an upload, in 64 KiB messages) would otherwise wait for a WINDOW_UPDATE every 64 KiB.
 * A stream may have STREAM_WINDOW_BYTES unread in the server, and all streams of one connection
 * CONNECTION_WINDOW_BYTES together: what a replica may buffer per caller beyond what it has read.
 * Frames of up to MAX_FRAME_BYTES: fewer DATA frames (and reads) per message than 16 KiB ones.
 */
export const STREAM_WINDOW_BYTES = 512 * 1024;
export const CONNECTION_WINDOW_BYTES = 2 * 1024 * 1024;
export const MAX_FRAME_BYTES = 256 * 1024;

/**
 * Calls between services are never compressed, either way: on a cluster's network gzip costs more
 * CPU than the bytes it saves (it was a tenth of the gateway's CPU on a token request, whose answer
 * of a few JWTs passed the 1 KiB above which connect-es compresses). Both the servers and the
 * clients (balanced-transport.ts) offer no encoding.
 */
export const NO_COMPRESSION = [];

/** The plane a method is served on: admin if the allow-list says so, else the data plane's port. */
const planeOf = (method: DescMethod): Plane => ruleFor(method.parent.typeName, method.name)?.plane ?? "runtime";

const healthRoutes = (healthy: ConnectServerOptions["healthy"]) => (router: ConnectRouter) =>
  router.service(Health, {
    // Service "liveness" answers whether the process serves at all (the liveness probe: a database
    // outage must not restart every pod); "traffic", whether the replica should take calls (a pod's
    // readiness probe): everything but Kafka, whose outage the outboxes ride out; any other name,
    // readiness of the whole (the gateway's /readyz): its database and Kafka are reachable.
    // Watch is not served (Unimplemented): poll Check.
    async check(req) {
      if (req.service === LIVENESS) return { status: ServingStatus.SERVING };
      return { status: (await healthy(req.service !== TRAFFIC)) ? ServingStatus.SERVING : ServingStatus.NOT_SERVING };
    },
  });

/**
 * The services' gRPC server (grpc-js, grpc-server.ts): the runtime RPCs and grpc.health.v1.Health
 * on `port`, the admin RPCs (allowed-callers.ts) on `adminPort` alone, so a network policy can admit
 * each caller to the plane it needs; a method a port does not serve is Unimplemented there, whoever
 * calls it. Every call but a health check must carry a service token its caller signed for this
 * service, and the caller must be allowed the method, on either port.
 */
export async function startConnectServer(opts: ConnectServerOptions): Promise<ConnectServer> {
  if (!opts.publicKeys)
    throw new SettingsError("invalid setting SERVICE_IDENTITY_PUBLIC_KEYS: required (every workload's public key)");
  const verifier = new TokenVerifier(opts.service, publicKeysFor(opts.publicKeys));
  const interceptors = [
    tracingServerInterceptor,
    loggingInterceptor(opts.logger),
    identityServerInterceptor(verifier, opts.logger),
  ];
  const runtime = [
    ...collectRoutes(opts.routes, (m) => planeOf(m) === "runtime"),
    ...collectRoutes(healthRoutes(opts.healthy)),
  ];
  const servers = [await listen(runtime, interceptors, opts.host, opts.port)];
  if (opts.adminPort !== undefined)
    servers.push(
      await listen(
        collectRoutes(opts.routes, (m) => planeOf(m) === "admin"),
        interceptors,
        opts.host,
        opts.adminPort,
      ),
    );
  const [port, adminPort] = servers.map((s) => s.port);
  opts.logger.info({ port, adminPort }, "grpc server listening");
  return { port: port!, adminPort, close: async () => void (await Promise.all(servers.map((s) => s.close()))) };
}

/** How long a stopping server lets the calls under way finish before it cuts them. */
const SHUTDOWN_GRACE_MS = 5_000;

async function listen(
  specs: MethodSpecs,
  interceptors: Interceptor[],
  host: string,
  port: number,
): Promise<ConnectServer> {
  const server = new grpc.Server({
    "grpc.max_receive_message_length": 8 * 1024 * 1024,
    "grpc-node.flow_control_window": CONNECTION_WINDOW_BYTES,
  });
  // grpc-js has no option for its server's HTTP/2 settings; its http2.createServer options are these.
  const http2Options = (server as unknown as { commonServerOptions?: { settings?: object } }).commonServerOptions;
  if (http2Options)
    http2Options.settings = {
      ...http2Options.settings,
      initialWindowSize: STREAM_WINDOW_BYTES,
      maxFrameSize: MAX_FRAME_BYTES,
    };
  const { definition, implementation } = grpcHandlers(specs, interceptors);
  server.addService(definition, implementation);
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(
      `${host.includes(":") ? `[${host}]` : host}:${port}`,
      grpc.ServerCredentials.createInsecure(),
      (err, p) => (err ? reject(err) : resolve(p)),
    ),
  );
  for (const h2 of (server as unknown as { http2Servers?: Map<http2.Http2Server, unknown> }).http2Servers?.keys() ??
    []) {
    h2.on("session", (s: http2.Http2Session) => s.setLocalWindowSize(CONNECTION_WINDOW_BYTES));
  }
  return {
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        const force = setTimeout(() => server.forceShutdown(), SHUTDOWN_GRACE_MS);
        force.unref();
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      }),
  };
}
