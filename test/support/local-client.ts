import { create, type DescService } from "@bufbuild/protobuf";
import { RpcError, Status } from "@pi/common/rpc/errors";
import type { Client } from "@pi/common/rpc/client";
import { WORKLOADS, type Workload } from "@pi/common/rpc/allowed-callers";
import { createLogger, type Logger } from "@pi/common/runtime/logger";
import { type Routes, type RpcServer, type ServiceImpl, startRpcServer } from "@pi/common/rpc/server";
import { generateIdentity } from "@pi/common/rpc/service-identity";

/**
 * A client of a service's handlers in memory (no network), for tests at the edge: a method the
 * handlers leave out is UNIMPLEMENTED, and any failure reaches the caller as the RpcError a server
 * would send (an error of another kind: UNKNOWN).
 */
export function localClient<T extends DescService>(service: T, impl: Partial<ServiceImpl<T>>): Client<T> {
  const client: Record<string, unknown> = {};
  for (const method of service.methods) {
    const handler = (impl as Record<string, ((...args: unknown[]) => unknown) | undefined>)[method.localName];
    client[method.localName] = async (input: unknown, options: { signal?: AbortSignal } = {}) => {
      if (!handler) throw new RpcError(`${method.name} is not implemented`, Status.UNIMPLEMENTED);
      const request =
        method.methodKind === "client_streaming"
          ? (async function* () {
              for await (const message of input as AsyncIterable<object>) yield create(method.input, message as never);
            })()
          : create(method.input, input as never);
      const context = { signal: options.signal ?? new AbortController().signal };
      try {
        return create(method.output, (await handler.call(impl, request, context)) as never);
      } catch (err) {
        throw RpcError.from(err);
      }
    };
  }
  return client as Client<T>;
}

const identities = new Map<Workload, { key: string; publicKey: string }>();
const identity = (name: Workload) => {
  if (!identities.has(name)) identities.set(name, generateIdentity(name));
  return identities.get(name)!;
};
const everyPublicKey = () => WORKLOADS.map((w) => identity(w).publicKey).join(",");

/** SERVICE_IDENTITY_KEY of a workload in this test process (one key pair each). */
export const testIdentityKey = (name: Workload) => identity(name).key;

/** The real gRPC server of `service` (rpc/server.ts) on a loopback port, with every workload's public key. */
export function serveForTest(
  service: Workload,
  routes: Routes,
  options: { port?: number; adminPort?: number; logger?: Logger; healthy?: () => Promise<boolean> } = {},
): Promise<RpcServer> {
  return startRpcServer({
    service,
    publicKeys: everyPublicKey(),
    host: "127.0.0.1",
    port: options.port ?? 0,
    adminPort: options.adminPort,
    routes,
    healthy: options.healthy ?? (async () => true),
    logger: options.logger ?? createLogger(service, "silent"),
  });
}
