import type { Readable } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary, type DescMessage, type DescMethod, type DescService } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createHandlerContext,
  createMethodImplSpec,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
} from "@connectrpc/connect";
import {
  createAsyncIterable,
  invokeUnaryImplementation,
  transformInvokeImplementation,
} from "@connectrpc/connect/protocol";
import { headerGrpcMessage, headerGrpcStatus, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";

// The services' handlers, written for connect-es (ConnectRouter routes, HandlerContext, ConnectError,
// Connect interceptors), served by @grpc/grpc-js: one internal call costs its server about a third
// of the CPU connect-node's gRPC handler costs (docs/performance.md, "One internal call"). The
// adapter is thin: grpc-js takes any serializer, so each method is described to it with the
// protobuf-es schemas (toBinary/fromBinary); a call becomes a HandlerContext (headers, deadline,
// cancellation) and goes through the same interceptors and implementation as under connect-node;
// a ConnectError's code is the gRPC status code it stands for, and leaves as that status.

/** The handlers of some methods, collected from a ConnectRouter's `routes` function. */
export type MethodSpecs = MethodImplSpec[];

/**
 * The methods `routes` registers (for which `keep` is true), collected through a ConnectRouter
 * stand-in: a route function written for connect-node registers as it always did.
 */
export function collectRoutes(
  routes: (router: ConnectRouter) => void,
  keep: (method: DescMethod) => boolean = () => true,
): MethodSpecs {
  const specs: MethodSpecs = [];
  const router = {
    handlers: [],
    service(service: DescService, implementation: Record<string, unknown>) {
      for (const method of service.methods) {
        const fn = implementation[method.localName];
        if (typeof fn === "function" && keep(method))
          specs.push(createMethodImplSpec(method, fn.bind(implementation) as never));
      }
      return router;
    },
    rpc(method: DescMethod, impl: unknown) {
      if (keep(method)) specs.push(createMethodImplSpec(method, impl as never));
      return router;
    },
  };
  routes(router as unknown as ConnectRouter);
  return specs;
}

const serializer =
  <T extends DescMessage>(schema: T) =>
  (message: unknown): Buffer => {
    const bytes = toBinary(schema, message as never);
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
const deserializer =
  <T extends DescMessage>(schema: T) =>
  (bytes: Buffer) =>
    fromBinary(schema, bytes);

/** How grpc-js knows a method: its path, its kind, and the protobuf-es (de)serializers of its messages. */
export function grpcMethodDefinition(method: DescMethod): grpc.MethodDefinition<unknown, unknown> {
  return {
    path: `/${method.parent.typeName}/${method.name}`,
    requestStream: method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming",
    responseStream: method.methodKind === "server_streaming" || method.methodKind === "bidi_streaming",
    requestSerialize: serializer(method.input),
    requestDeserialize: deserializer(method.input),
    responseSerialize: serializer(method.output),
    responseDeserialize: deserializer(method.output),
    originalName: method.localName,
  };
}

/** Request metadata as the headers a HandlerContext is made of (binary values stay base64, as in Connect). */
function headersOf(metadata: grpc.Metadata): Record<string, string> {
  const headers: Record<string, string> = {};
  const map = metadata.getMap();
  for (const key in map) {
    const value = map[key]!;
    headers[key] = typeof value === "string" ? value : value.toString("base64");
  }
  return headers;
}

function metadataOf(headers: Headers): grpc.Metadata | undefined {
  let metadata: grpc.Metadata | undefined;
  headers.forEach((value, key) => {
    metadata ??= new grpc.Metadata();
    if (key.endsWith("-bin")) metadata.add(key, Buffer.from(value, "base64"));
    else metadata.add(key, value);
  });
  return metadata;
}

/**
 * A handler's failure as the gRPC status it stands for (Connect's codes are gRPC's), its metadata
 * and its details (grpc-status-details-bin, as connect-node sends them) in the trailers; grpc-js
 * writes grpc-status and grpc-message itself.
 */
export function statusOf(err: unknown): Partial<grpc.StatusObject> {
  const ce = ConnectError.from(err);
  const trailer = setTrailerStatus(new Headers(), ce);
  trailer.delete(headerGrpcStatus);
  trailer.delete(headerGrpcMessage);
  return { code: ce.code as number as grpc.status, details: ce.rawMessage, metadata: metadataOf(trailer) };
}

type AnyCall =
  | grpc.ServerUnaryCall<unknown, unknown>
  | grpc.ServerReadableStream<unknown, unknown>
  | grpc.ServerWritableStream<unknown, unknown>;

/** The reason of every finished call's signal: one object, instead of a DOMException (and its stack trace) per call. */
const CALL_FINISHED = new DOMException("This operation was aborted", "AbortError");

type CallContext = HandlerContext & { abort(reason?: unknown): void };

/**
 * The HandlerContext of a call, and `finish`, which ends it: its signal is aborted once the call
 * has its answer (one shared reason), or when the caller cancels it before (grpc-js tells of a
 * call's end as a cancellation too, even after the answer).
 */
function contextOf(spec: MethodImplSpec, call: AnyCall): { context: CallContext; finish: () => void } {
  const deadline = call.getDeadline();
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  const cancelled = new AbortController();
  const onCancel = () => cancelled.abort(new ConnectError("the call was cancelled", Code.Canceled));
  const events = call as unknown as NodeJS.EventEmitter;
  events.once("cancelled", onCancel);
  const context = createHandlerContext({
    service: spec.method.parent,
    method: spec.method,
    protocolName: "grpc",
    requestMethod: "POST",
    url: call.getPath(),
    timeoutMs: Number.isFinite(at) ? Math.max(at - Date.now(), 0) : undefined,
    requestHeader: headersOf(call.metadata),
    requestSignal: cancelled.signal,
  }) as CallContext;
  return {
    context,
    finish: () => {
      events.removeListener("cancelled", onCancel);
      context.abort(CALL_FINISHED);
    },
  };
}

/**
 * Messages of a client stream read ahead of its handler. An upload's are 256 KiB each: the 16 of an
 * object-mode stream's default outlived two young-generation collections, and 4 MiB per upload of
 * promoted buffers waited for a full collection (docs/performance.md, "What an upload leaves for
 * the collector"). Beyond these, the stream's HTTP/2 window (connect-server.ts) keeps the next
 * bytes coming.
 */
export const CLIENT_STREAM_READ_AHEAD = 2;

/** Sets how many messages `stream` reads ahead of its consumer. */
export function limitReadAhead(stream: Readable, messages: number): void {
  // grpc-js creates the stream, with no option for it, and Node has no public setter once a stream exists.
  (stream as unknown as { _readableState: { highWaterMark: number } })._readableState.highWaterMark = messages;
}

/**
 * A client stream's messages. A stream its caller reset ends in Canceled, not as if it were whole:
 * grpc-js takes the end of the request that a reset brings for a half-close, and tells of the
 * reset only a few ticks later ('cancelled'), so the end is checked once those have run.
 */
async function* requestsOf(call: grpc.ServerReadableStream<unknown, unknown>): AsyncIterable<never> {
  limitReadAhead(call, CLIENT_STREAM_READ_AHEAD);
  for await (const message of call) yield message as never;
  await new Promise((resolve) => setImmediate(resolve));
  if (call.cancelled) throw new ConnectError("the call was cancelled before its last message", Code.Canceled);
}

/** grpc-js handlers that run each method's Connect implementation behind `interceptors`. */
export function grpcHandlers(
  specs: MethodSpecs,
  interceptors: Interceptor[],
): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  for (const spec of specs) {
    const name = `${spec.method.parent.typeName}/${spec.method.name}`;
    definition[name] = grpcMethodDefinition(spec.method);
    switch (spec.kind) {
      case "unary":
        implementation[name] = ((
          call: grpc.ServerUnaryCall<unknown, unknown>,
          callback: grpc.sendUnaryData<unknown>,
        ) => {
          const { context, finish } = contextOf(spec, call);
          invokeUnaryImplementation(spec, context, call.request as never, interceptors).then(
            (message) => {
              finish();
              callback(null, message, metadataOf(context.responseTrailer));
            },
            (err: unknown) => {
              finish();
              callback(statusOf(err));
            },
          );
        }) as grpc.handleUnaryCall<unknown, unknown>;
        break;
      case "client_streaming":
        implementation[name] = ((
          call: grpc.ServerReadableStream<unknown, unknown>,
          callback: grpc.sendUnaryData<unknown>,
        ) => {
          const { context, finish } = contextOf(spec, call);
          void (async () => {
            try {
              let answer: unknown;
              for await (const message of transformInvokeImplementation(spec, context, interceptors)(requestsOf(call)))
                answer = message;
              callback(null, answer, metadataOf(context.responseTrailer));
            } catch (err) {
              callback(statusOf(err));
            } finally {
              finish();
            }
          })();
        }) as grpc.handleClientStreamingCall<unknown, unknown>;
        break;
      case "server_streaming":
        implementation[name] = ((call: grpc.ServerWritableStream<unknown, unknown>) => {
          const { context, finish } = contextOf(spec, call);
          void (async () => {
            try {
              for await (const message of transformInvokeImplementation(
                spec,
                context,
                interceptors,
              )(createAsyncIterable([call.request as never]))) {
                if (call.cancelled) break;
                if (!call.write(message)) await new Promise((resolve) => call.once("drain", resolve));
              }
              call.end(metadataOf(context.responseTrailer));
            } catch (err) {
              // grpc-js answers a stream's 'error' with that status.
              call.emit("error", statusOf(err));
            } finally {
              finish();
            }
          })();
        }) as grpc.handleServerStreamingCall<unknown, unknown>;
        break;
      default:
        // No service here serves a bidirectional stream (grpc.health.v1.Health/Watch is left unserved).
        throw new Error(`${name}: bidirectional streams are not served`);
    }
  }
  return { definition, implementation };
}
