import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport, createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { authv1 } from "@pi/proto";

// connect-es 2.1.2 aborted every finished call's signals with a new DOMException, on the client
// (run-call's done()) and twice on the server (the handler's context, the request's stream): each
// one captures a stack trace, a few percent of every internal call's CPU. The patches under
// patches/@connectrpc+* give every finished call one shared reason instead (issue 14, cause 7).
// These tests drive the installed packages, so they fail if the patches are not applied.

let server: http2.Http2Server;
let baseUrl: string;
const serverSignals: AbortSignal[] = [];
const clientSignals: AbortSignal[] = [];
const sessions: Http2SessionManager[] = [];

const keepClientSignal: Interceptor = (next) => (req) => {
  clientSignals.push(req.signal);
  return next(req);
};

beforeAll(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(authv1.AuthService, {
        getJwks(_req, ctx) {
          serverSignals.push(ctx.signal);
          return { jwksJson: "{}", issuer: "i", audience: "a" };
        },
      }),
  });
  server = http2.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of sessions) s.abort();
  await new Promise((resolve) => server.close(resolve));
});

/** Once the server has seen the stream close, the handler's signal is aborted. */
async function settled(signal: AbortSignal): Promise<void> {
  if (!signal.aborted) await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
}

describe.each([
  ["gRPC", createGrpcTransport],
  ["Connect", createConnectTransport],
] as const)("finished %s calls share one abort reason", (_protocol, createTransport) => {
  it("client and server signals of two finished calls are aborted with the same reason, not one DOMException each", async () => {
    serverSignals.length = 0;
    clientSignals.length = 0;
    const sessionManager = new Http2SessionManager(baseUrl);
    sessions.push(sessionManager);
    const client = createClient(authv1.AuthService, createTransport({ baseUrl, httpVersion: "2", sessionManager, interceptors: [keepClientSignal] }));
    await client.getJwks({});
    await client.getJwks({});
    await Promise.all(serverSignals.map(settled));

    expect(clientSignals).toHaveLength(2);
    expect(serverSignals).toHaveLength(2);
    for (const signal of [...clientSignals, ...serverSignals]) {
      expect(signal.aborted).toBe(true);
      expect((signal.reason as DOMException).name).toBe("AbortError");
    }
    expect(clientSignals[1]!.reason).toBe(clientSignals[0]!.reason);
    expect(serverSignals[1]!.reason).toBe(serverSignals[0]!.reason);
  });
});
