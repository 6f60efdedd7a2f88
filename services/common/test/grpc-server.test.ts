import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import * as grpc from "@grpc/grpc-js";
import { RpcError, Status } from "../src/errors.js";
import type { Router, HandlerContext } from "../src/rpc/server.js";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { authv1, fileintakev1, healthv1 } from "@pi/proto";
import { commonv1 } from "@pi/proto";
import { reasonOf, serviceError } from "../src/errors.js";
import { CLIENT_STREAM_READ_AHEAD, collectRoutes, grpcHandlers, limitReadAhead } from "../src/grpc-server.js";

// The services' handlers are written for connect-es and served by grpc-js (grpc-server.ts); their
// callers are connect-es clients. What a handler sees of a call and what its caller sees of the
// answer must be what connect-node gave them.

const seen: {
  header?: string | null;
  timeoutMs?: number;
  signal?: AbortSignal;
  chunks: number[];
  streamError?: unknown;
} = { chunks: [] };
let release: (() => void) | undefined;
let entered: (() => void) | undefined;
let streamStarted: (() => void) | undefined;

const routes = (router: Router) => {
  router.service(authv1.AuthService, {
    async issueToken(req, ctx: HandlerContext) {
      seen.header = ctx.requestHeader.get("x-probe");
      seen.timeoutMs = ctx.timeoutMs();
      seen.signal = ctx.signal;
      if (req.clientId === "missing")
        throw new RpcError("no such client", Status.NOT_FOUND, { "x-why": "unknown id" });
      if (req.clientId === "crash") throw new Error("a bug");
      if (req.clientId === "refused") throw serviceError(commonv1.ErrorReason.NOT_FOUND, "no such connection", "id");
      if (req.clientId === "wait") await new Promise<void>((resolve) => ((release = resolve), entered?.()));
      return {
        outcome: { case: "token", value: { accessToken: `token of ${req.clientId}`, expiresIn: 60n, scope: "s" } },
      };
    },
  });
  router.service(healthv1.Health, {
    async *watch(req) {
      for (let i = 0; i < 3; i++) yield { status: healthv1.HealthCheckResponse_ServingStatus.SERVING };
      if (req.service === "fail") throw new RpcError("gone", Status.UNAVAILABLE);
    },
  });
  router.service(fileintakev1.FileIntakeService, {
    async submitFile(requests) {
      seen.chunks = [];
      try {
        for await (const r of requests) {
          if (r.part.case === "chunk") seen.chunks.push(r.part.value[0]!);
          streamStarted?.();
        }
      } catch (err) {
        seen.streamError = err;
        throw err;
      }
      return { file: { id: `file_${seen.chunks.length}` } };
    },
  });
};

/** A server interceptor refusing calls that carry `x-refuse`, as the identity interceptor refuses. */
const refuser: Interceptor = (next) => async (req) => {
  if (req.header.get("x-refuse")) throw new RpcError("refused", Status.PERMISSION_DENIED);
  return next(req);
};

let server: grpc.Server;
let auth: ReturnType<typeof createClient<typeof authv1.AuthService>>;
let health: ReturnType<typeof createClient<typeof healthv1.Health>>;
let files: ReturnType<typeof createClient<typeof fileintakev1.FileIntakeService>>;

beforeAll(async () => {
  server = new grpc.Server();
  const { definition, implementation } = grpcHandlers(collectRoutes(routes), [refuser]);
  server.addService(definition, implementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  const transport = createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}` });
  auth = createClient(authv1.AuthService, transport);
  files = createClient(fileintakev1.FileIntakeService, transport);
  health = createClient(healthv1.Health, transport);
});

afterAll(() => server.forceShutdown());

const failure = async (p: Promise<unknown>) =>
  RpcError.from(
    await p.then(
      () => undefined,
      (err: unknown) => err,
    ),
  );

describe("Connect handlers served by grpc-js", () => {
  it("answers a unary call", async () => {
    const res = await auth.issueToken({ clientId: "a" });
    expect(res.outcome.case === "token" && res.outcome.value.accessToken).toBe("token of a");
  });

  it("a handler's RpcError reaches its caller with the same code, message and metadata", async () => {
    const err = await failure(auth.issueToken({ clientId: "missing" }));
    expect(err.code).toBe(Status.NOT_FOUND);
    expect(err.message).toBe("no such client");
    expect(err.metadata.get("x-why")).toBe("unknown id");
  });

  it("a service error's details (its reason and parameter) reach its caller", async () => {
    const err = await failure(auth.issueToken({ clientId: "refused" }));
    expect(err.message).toBe("no such connection");
    expect(reasonOf(err)).toEqual({ reason: commonv1.ErrorReason.NOT_FOUND, param: "id" });
  });

  it("any other error of a handler is Unknown to its caller", async () => {
    expect((await failure(auth.issueToken({ clientId: "crash" }))).code).toBe(Status.UNKNOWN);
  });

  it("the handler sees the caller's headers and what is left of its deadline", async () => {
    await auth.issueToken({ clientId: "a" }, { headers: { "x-probe": "here" }, timeoutMs: 5_000 });
    expect(seen.header).toBe("here");
    expect(seen.timeoutMs).toBeGreaterThan(0);
    expect(seen.timeoutMs).toBeLessThanOrEqual(5_000);
  });

  it("a call without a deadline has none at the handler", async () => {
    await auth.issueToken({ clientId: "a" });
    expect(seen.timeoutMs).toBeUndefined();
  });

  it("the server's interceptors run before the handler and can refuse the call", async () => {
    const err = await failure(auth.issueToken({ clientId: "a" }, { headers: { "x-refuse": "1" } }));
    expect(err.code).toBe(Status.PERMISSION_DENIED);
  });

  it("a call its caller gives up aborts the handler's signal", async () => {
    const controller = new AbortController();
    const inHandler = new Promise<void>((resolve) => (entered = resolve));
    const call = auth.issueToken({ clientId: "wait" }, { signal: controller.signal });
    await inHandler;
    const signal = seen.signal!;
    expect(signal.aborted).toBe(false);
    controller.abort();
    await call.catch(() => undefined);
    await new Promise<void>((resolve) =>
      signal.aborted ? resolve() : signal.addEventListener("abort", () => resolve()),
    );
    expect(RpcError.from(signal.reason).code).toBe(Status.CANCELLED);
    release!();
    release = undefined;
  });

  it("a call that was answered ends its handler's signal with the one shared reason, not an error per call", async () => {
    await auth.issueToken({ clientId: "a" });
    const first = seen.signal!;
    await auth.issueToken({ clientId: "b" });
    expect(first.aborted && seen.signal!.aborted).toBe(true);
    expect(seen.signal!.reason).toBe(first.reason);
  });

  it("a response stream's messages reach the caller, and a failure after them its code", async () => {
    const statuses: number[] = [];
    for await (const r of health.watch({ service: "" })) statuses.push(r.status);
    expect(statuses).toEqual([1, 1, 1]);
    let n = 0;
    const err = await failure(
      (async () => {
        for await (const _ of health.watch({ service: "fail" })) n++;
      })(),
    );
    expect(n).toBe(3);
    expect(err.code).toBe(Status.UNAVAILABLE);
    expect(err.message).toBe("gone");
  });

  it("a client stream's messages reach the handler in order", async () => {
    async function* parts() {
      yield { part: { case: "header" as const, value: { partnerId: "p" } } };
      for (let i = 1; i <= 5; i++) yield { part: { case: "chunk" as const, value: new Uint8Array([i]) } };
      yield { part: { case: "trailer" as const, value: { elderAddress: "e" } } };
    }
    const res = await files.submitFile(parts());
    expect(res.file?.id).toBe("file_5");
    expect(seen.chunks).toEqual([1, 2, 3, 4, 5]);
  });

  it("a client stream its caller gives up ends the handler's reading with an error (no handler waits forever)", async () => {
    seen.streamError = undefined;
    const controller = new AbortController();
    const started = new Promise<void>((resolve) => (streamStarted = resolve));
    async function* parts() {
      yield { part: { case: "header" as const, value: { partnerId: "p" } } };
      await new Promise(() => {}); // never sends the rest
    }
    const call = files.submitFile(parts(), { signal: controller.signal }).catch((err: unknown) => err);
    await started;
    controller.abort();
    await call;
    // The handler's loop fails on its own (the sentinel); a loop left waiting would time the test out.
    while (seen.streamError === undefined) await new Promise((r) => setTimeout(r, 10));
    expect(seen.streamError).toBeDefined();
    streamStarted = undefined;
  });
});

describe("client streams are read a few messages ahead, not 16", () => {
  /** How many messages a stream of endless messages has read once its consumer took one, and every tick since has run. */
  async function readAfterOne(limit?: number): Promise<number> {
    let reads = 0;
    const stream = new Readable({
      objectMode: true,
      read() {
        this.push(++reads);
      },
    });
    if (limit !== undefined) limitReadAhead(stream, limit);
    const messages = stream[Symbol.asyncIterator]();
    expect((await messages.next()).value).toBe(1);
    // The read-ahead runs in ticks of its own; once an immediate has run, none is left.
    await new Promise((resolve) => setImmediate(resolve));
    stream.destroy();
    return reads;
  }

  it("a handler that took one message has at most CLIENT_STREAM_READ_AHEAD more read for it", async () => {
    expect(await readAfterOne()).toBeGreaterThan(16);
    expect(await readAfterOne(CLIENT_STREAM_READ_AHEAD)).toBeLessThanOrEqual(1 + CLIENT_STREAM_READ_AHEAD);
  });
});
