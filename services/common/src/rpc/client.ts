import type { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type DescMethod,
  type DescService,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import { detailOf, RpcError } from "./errors.js";
import { minterFor, SERVICE_TOKEN_HEADER } from "./service-identity.js";
import { SERVICE_OF } from "./allowed-callers.js";
import { rpcClientSpan } from "../runtime/telemetry.js";
import { targetOf } from "./service-urls.js";

export interface CallOptions {
  /** 10 s unless given: a stuck service never hangs its caller. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

type MethodClient<M> = M extends {
  methodKind: "unary";
  input: infer I extends DescMessage;
  output: infer O extends DescMessage;
}
  ? (request: MessageInitShape<I>, options?: CallOptions) => Promise<MessageShape<O>>
  : M extends {
        methodKind: "client_streaming";
        input: infer I extends DescMessage;
        output: infer O extends DescMessage;
      }
    ? (requests: AsyncIterable<MessageInitShape<I>>, options?: CallOptions) => Promise<MessageShape<O>>
    : never;

/** A promise client of a service, derived from its protobuf-es descriptor. */
export type Client<T extends DescService> = { [K in keyof T["method"]]: MethodClient<T["method"][K]> };

const DEFAULT_TIMEOUT_MS = 10_000;

/**
 * round_robin over the replicas that are READY; a replica whose connection failed is passed over
 * until it reconnects. A call that never reached a server is made again by grpc-js on its own
 * (transparent retry); an idempotent one (`idempotency_level` in its .proto) also after an
 * UNAVAILABLE, on another replica. Keepalive PINGs find a replica that vanished without a word.
 */
function channelOptions(service: DescService): grpc.ChannelOptions {
  const idempotent = service.methods.filter(
    (m) => m.methodKind === "unary" && m.idempotency !== MethodOptions_IdempotencyLevel.IDEMPOTENCY_UNKNOWN,
  );
  const retryPolicy = {
    maxAttempts: 4,
    initialBackoff: "0.05s",
    maxBackoff: "0.4s",
    backoffMultiplier: 2,
    retryableStatusCodes: ["UNAVAILABLE"],
  };
  const methodConfig = idempotent.length
    ? [{ name: idempotent.map((m) => ({ service: service.typeName, method: m.name })), retryPolicy }]
    : [];
  return {
    "grpc.service_config": JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }], methodConfig }),
    "grpc.keepalive_time_ms": 5_000,
    "grpc.keepalive_timeout_ms": 2_000,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 2_000,
    "grpc.dns_min_time_between_resolutions_ms": 5_000,
    "grpc.max_receive_message_length": 8 * 1024 * 1024,
  };
}

const serialize = (schema: DescMessage) => (message: unknown) => {
  const bytes = toBinary(schema, create(schema, message as never));
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
};
const deserialize = (schema: DescMessage) => (bytes: Buffer) => fromBinary(schema, bytes);

/**
 * A client of every replica of a service: `urls` is a `*_SERVICE_URL` value. With `identity` (a
 * SERVICE_IDENTITY_KEY value) every call carries the caller's service token (service-identity.ts);
 * without it, calls go unsigned and only health checks are answered.
 */
export function serviceClient<T extends DescService>(service: T, urls: string, identity?: string): Client<T> {
  const channel = new grpc.Client(targetOf(urls), grpc.credentials.createInsecure(), channelOptions(service));
  const audience = SERVICE_OF[service.typeName];
  const minter = identity && audience ? minterFor(identity) : undefined;
  const client: Record<string, unknown> = {};
  for (const method of service.methods) {
    const path = pathOf(method);
    const [req, res] = [serialize(method.input), deserialize(method.output)];
    const call = (
      options: CallOptions,
      run: (metadata: grpc.Metadata, callOptions: grpc.CallOptions) => Promise<unknown>,
    ) =>
      rpcClientSpan(method, async (traceHeaders) => {
        const metadata = new grpc.Metadata();
        for (const [key, value] of Object.entries(traceHeaders)) metadata.set(key, value);
        if (minter) metadata.set(SERVICE_TOKEN_HEADER, await minter.token(audience!));
        return run(metadata, { deadline: Date.now() + (options.timeoutMs ?? DEFAULT_TIMEOUT_MS) });
      });
    if (method.methodKind === "unary")
      client[method.localName] = (input: object, options: CallOptions = {}) =>
        call(options, (metadata, callOptions) =>
          cancellable(options.signal, (done) =>
            channel.makeUnaryRequest(path, req, res, input, metadata, callOptions, done),
          ),
        );
    else if (method.methodKind === "client_streaming")
      client[method.localName] = (input: AsyncIterable<object>, options: CallOptions = {}) =>
        call(options, (metadata, callOptions) =>
          cancellable(options.signal, (done) => {
            const stream = channel.makeClientStreamRequest(path, (b: Buffer) => b, res, metadata, callOptions, done);
            // Ended, the call lets the pipeline go: it stops waiting for room and returns the input.
            stream.once("status", () => stream.destroy());
            // Each message waits for the stream's room (HTTP/2 flow control): an upload moves at its reader's pace.
            // Serialized as it is read: the caller may reuse its buffers once it is asked for the next message.
            pipeline(async function* () {
              for await (const message of input) yield req(message);
            }, stream as Writable).catch(() => stream.cancel());
            return stream;
          }),
        );
  }
  channels.set(client, channel);
  return client as Client<T>;
}

const channels = new WeakMap<object, grpc.Client>();

/** Closes a client's connections (a process's clients live as long as it does; tests close theirs). */
export const closeClient = (client: object) => channels.get(client)?.close();

/** Runs a grpc-js call, cancelled when `signal` aborts; its failure as an RpcError with the ErrorDetail its server sent. */
function cancellable<R>(
  signal: AbortSignal | undefined,
  start: (done: (err: grpc.ServiceError | null, value?: R) => void) => grpc.Call,
): Promise<R> {
  return new Promise<R>((resolve, reject) => {
    const onAbort = () => grpcCall.cancel();
    const grpcCall = start((err, value) => {
      signal?.removeEventListener("abort", onAbort);
      if (err) reject(new RpcError(err.details, err.code, detailOf(err.metadata), err));
      else resolve(value as R);
    });
    if (signal?.aborted) onAbort();
    else signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A method's path, for a server of the same definitions (rpc/server.ts). */
export const pathOf = (method: DescMethod) => `/${method.parent.typeName}/${method.name}`;
export { serialize, deserialize };
