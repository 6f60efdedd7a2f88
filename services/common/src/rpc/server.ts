import type { DescMessage, DescMethod, DescService, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { healthv1 } from "@pi/proto";
import { ruleFor, type Workload } from "./allowed-callers.js";
import { RpcError, Status, trailersOf } from "./errors.js";
import type { Logger } from "../runtime/logger.js";
import { checkCaller, parsePublicKeys, SERVICE_TOKEN_HEADER, TokenVerifier } from "./service-identity.js";
import { rpcServerSpan } from "../runtime/telemetry.js";
import { deserialize, pathOf, serialize } from "./client.js";

const { Health, HealthCheckResponse_ServingStatus: ServingStatus } = healthv1;

/** What a handler knows of its call: a signal aborted once the call ends or is cancelled. */
export interface HandlerContext {
  signal: AbortSignal;
}

type Reply<O extends DescMessage> = MessageInitShape<O> | Promise<MessageInitShape<O>>;
type MethodImpl<M> = M extends {
  methodKind: "unary";
  input: infer I extends DescMessage;
  output: infer O extends DescMessage;
}
  ? (request: MessageShape<I>, context: HandlerContext) => Reply<O>
  : M extends {
        methodKind: "client_streaming";
        input: infer I extends DescMessage;
        output: infer O extends DescMessage;
      }
    ? (requests: AsyncIterable<MessageShape<I>>, context: HandlerContext) => Reply<O>
    : never;

/** A service's handlers, as plain functions of their request. */
export type ServiceImpl<T extends DescService> = { [K in keyof T["method"]]: MethodImpl<T["method"][K]> };
export interface Router {
  service<T extends DescService>(service: T, impl: Partial<ServiceImpl<T>>): Router;
}
/** A service's routes: `(router) => router.service(Service, impl)`. */
export type Routes = (router: Router) => void;

type Handler = (request: unknown, context: HandlerContext) => unknown;

function collectRoutes(routes: Routes): [DescMethod, Handler][] {
  const found: [DescMethod, Handler][] = [];
  const router: Router = {
    service(service, impl) {
      for (const method of service.methods) {
        const fn = (impl as Record<string, Handler | undefined>)[method.localName];
        if (fn) found.push([method, fn.bind(impl)]);
      }
      return router;
    },
  };
  routes(router);
  return found;
}

/** Health check service names: the process serves (liveness; a database outage must not restart every pod)... */
export const LIVENESS = "liveness";
/** ...and the replica should take calls (a pod's readiness): all but Kafka, whose outage the outboxes ride out. */
export const TRAFFIC = "traffic";

// Failures to reach the service's own database or Kafka: answered UNAVAILABLE (a fast envelope 503 at
// the gateway), not INTERNAL. Matched by name along the cause chain (drivers' errors may come from
// another realm in tests, or be wrapped), and by the code of a bare socket error (the MongoDB driver
// lets one through when it writes to a connection the server has closed) or of @platformatic/kafka.
const INFRASTRUCTURE_ERRORS =
  /^(Mongo)?(ServerSelection|Network|NetworkTimeout|NotConnected|TopologyClosed|PoolCleared|PoolClearedOnNetwork)Error$/;
const INFRASTRUCTURE_CODES =
  /^(EPIPE|ECONNRESET|ECONNREFUSED|ECONNABORTED|ETIMEDOUT|ENOTCONN|PLT_KFK_NETWORK|PLT_KFK_TIMEOUT)$/;

export function infrastructureUnavailable(err: unknown): boolean {
  for (let e = err, depth = 0; typeof e === "object" && e !== null && depth < 8; depth++) {
    const { name, code, originalError, cause } = e as Record<string, unknown>;
    if (INFRASTRUCTURE_ERRORS.test(String(name)) || INFRASTRUCTURE_CODES.test(String(code))) return true;
    if (e instanceof AggregateError && e.errors.some(infrastructureUnavailable)) return true;
    if (originalError && infrastructureUnavailable(originalError)) return true;
    e = cause;
  }
  return false;
}

/** A handler's failure as the status its caller gets, logged unless it is a deliberate refusal (without the request). */
function failureOf(err: unknown, method: DescMethod, started: number, logger: Logger): RpcError {
  const failure =
    !(err instanceof RpcError) && infrastructureUnavailable(err)
      ? new RpcError("a dependency of the service is unreachable", Status.UNAVAILABLE, undefined, err)
      : RpcError.from(err);
  const fields = { method: method.name, code: Status[failure.code], ms: Math.round(performance.now() - started) };
  if (failure.code === Status.INTERNAL || failure.code === Status.UNKNOWN)
    logger.error({ ...fields, err }, "rpc failed");
  else if (failure.code === Status.UNAVAILABLE)
    logger.warn(
      { ...fields, err: (failure.cause as Error | undefined)?.message ?? failure.message },
      "rpc unavailable",
    );
  else logger.debug(fields, "rpc refused");
  return failure;
}

/**
 * A client stream's messages. One its caller reset ends in CANCELLED, not as if it were whole: grpc-js
 * takes the end a reset brings for a half-close and tells of the reset ('cancelled') a few ticks later.
 */
async function* requestsOf(call: grpc.ServerReadableStream<unknown, unknown>): AsyncIterable<unknown> {
  yield* call;
  await new Promise((resolve) => setImmediate(resolve));
  if (call.cancelled) throw new RpcError("the call was cancelled before its last message", Status.CANCELLED);
}

// The reasons the signal of a finished call carries: fixed ones, since the default (a DOMException
// with its stack) was about 6% of the connection service's CPU per poll. grpc-js tells of a
// cancellation after every call's trailers too, so that one is made once as well.
const CALL_ENDED = new RpcError("the call has ended", Status.CANCELLED);
const CALL_CANCELLED = new RpcError("the call was cancelled", Status.CANCELLED);

/**
 * The one wrapper of every handler: a SERVER span and duration metric, the caller's service token and
 * its place on the allow-list (health checks excepted), then the handler; its failure as a status.
 */
function grpcHandler(method: DescMethod, handler: Handler, verifier: TokenVerifier, logger: Logger) {
  return (
    call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerReadableStream<unknown, unknown>,
    callback: grpc.sendUnaryData<unknown>,
  ) => {
    const started = performance.now();
    const ended = new AbortController();
    // After the end, a late "cancelled" finds the signal aborted already (a no-op).
    call.once("cancelled", () => ended.abort(CALL_CANCELLED));
    const request = "request" in call ? call.request : requestsOf(call);
    rpcServerSpan(method, call.metadata.getMap(), async () => {
      const [token] = call.metadata.get(SERVICE_TOKEN_HEADER);
      await checkCaller(verifier, logger, method, typeof token === "string" ? token : undefined);
      return handler(request, { signal: ended.signal });
    })
      .then(
        (response) => callback(null, response),
        (err: unknown) => {
          const failure = failureOf(err, method, started, logger);
          // An answer of the service is never made again elsewhere: a negative pushback stops
          // grpc-js's retry policy (idempotent methods retry only UNAVAILABLE without an answer).
          const metadata = trailersOf(failure) ?? new grpc.Metadata();
          metadata.set("grpc-retry-pushback-ms", "-1");
          callback({ code: failure.code, details: failure.message, metadata });
        },
      )
      .finally(() => ended.abort(CALL_ENDED));
  };
}

export interface RpcServerOptions {
  /** The service's name: the audience its callers' tokens must name. */
  service: Workload;
  /** SERVICE_IDENTITY_PUBLIC_KEYS: every workload's public key (service-identity.ts). */
  publicKeys: string | undefined;
  host: string;
  /** The data plane's port: the runtime RPCs and the health checks. */
  port: number;
  /** The admin plane's port (`*_ADMIN_PORT`): the service's admin RPCs, and nothing else. */
  adminPort?: number;
  routes: Routes;
  /** Whether the service reaches everything it depends on; with `withKafka` false, everything but Kafka. */
  healthy: (withKafka: boolean) => Promise<boolean>;
  logger: Logger;
}

export type RpcServer = Awaited<ReturnType<typeof startRpcServer>>;

/**
 * The services' gRPC server: the runtime RPCs and grpc.health.v1.Health on `port`, the admin RPCs
 * (allowed-callers.ts) on `adminPort` alone, so a network policy admits each caller to the plane it
 * needs; a method a port does not serve is UNIMPLEMENTED there. Every call but a health check must
 * carry a service token its caller signed for this service, and the caller must be allowed the method.
 */
export async function startRpcServer(opts: RpcServerOptions) {
  // A process has checked the setting at its start (requireIdentity); without it no key is known.
  const verifier = new TokenVerifier(opts.service, parsePublicKeys(opts.publicKeys ?? ""));
  const routes = collectRoutes(opts.routes);
  const plane = (name: string) =>
    routes.filter(([m]) => (ruleFor(m.parent.typeName, m.name)?.plane ?? "runtime") === name);
  // Watch is not served: poll Check. Any name but these two asks for the whole (the gateway's /readyz).
  const check: Handler = async (request) => {
    const { service } = request as healthv1.HealthCheckRequest;
    const serving = service === LIVENESS || (await opts.healthy(service !== TRAFFIC));
    return { status: serving ? ServingStatus.SERVING : ServingStatus.NOT_SERVING };
  };
  const listen = async (handlers: [DescMethod, Handler][], port: number) => {
    // A connection lives at most a minute, so that clients look a host name up again and find new replicas.
    const server = new grpc.Server({
      "grpc.max_receive_message_length": 8 * 1024 * 1024,
      "grpc.max_connection_age_ms": 60_000,
    });
    for (const [method, handler] of handlers)
      server.register(
        pathOf(method),
        grpcHandler(method, handler, verifier, opts.logger) as grpc.UntypedHandleCall,
        serialize(method.output),
        deserialize(method.input),
        method.methodKind === "client_streaming" ? "clientStream" : "unary",
      );
    const address = `${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${port}`;
    const bound = await new Promise<number>((resolve, reject) =>
      server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    // Calls under way get 5 s to finish once the server stops.
    const close = () =>
      new Promise<void>((resolve) => {
        const force = setTimeout(() => server.forceShutdown(), 5_000).unref();
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
    return { port: bound, close };
  };
  const servers = [await listen([...plane("runtime"), [Health.method.check, check]], opts.port)];
  if (opts.adminPort !== undefined) servers.push(await listen(plane("admin"), opts.adminPort));
  const [port, adminPort] = servers.map((s) => s.port);
  opts.logger.info({ port, adminPort }, "grpc server listening");
  return { port: port!, adminPort, close: async () => void (await Promise.all(servers.map((s) => s.close()))) };
}
