import { afterEach, describe, expect, it } from "@jest/globals";
import { createHook } from "node:async_hooks";
import http2 from "node:http2";
import type { AddressInfo, Socket } from "node:net";
import { RpcError, Status } from "../src/errors.js";
import { createClient } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { authv1, fileintakev1 } from "@pi/proto";
import { BalancedTransport, classifyFailure } from "../src/balanced-transport.js";
import { parseServiceUrls, ServiceEndpoints } from "../src/service-endpoints.js";

// Replicas of a service as real HTTP/2 servers on loopback; the client is the one every service uses.

interface Replica {
  port: number;
  calls: number;
  /** Messages received on client streams (uploads). */
  messages: number;
  /** The first byte of each chunk received, in order. */
  received: number[];
  /** Ends every connection abruptly, as a killed process would (the kernel resets them). */
  kill(): Promise<void>;
  /**
   * Stops listening and closes every connection at once, without a word (no GOAWAY), as a process
   * killed while its connections were quiet: the kernel ends them with a FIN, not a reset.
   */
  die(): void;
  /** Says GOAWAY (NO_ERROR) on every connection, as a process shutting down gracefully does, without waiting. */
  goAway(): void;
}

type Behaviour = { jwks?: () => Promise<void>; createPartner?: () => Promise<void>; submitFile?: () => Promise<void> };

async function replica(behaviour: Behaviour = {}, port = 0): Promise<Replica> {
  const sessions = new Set<http2.Http2Session>();
  const r = { port: 0, calls: 0, messages: 0, received: [] } as unknown as Replica;
  const handler = connectNodeAdapter({
    routes: (router) => {
      router.service(fileintakev1.FileIntakeService, {
        async submitFile(requests) {
          r.calls++;
          for await (const request of requests) {
            r.messages++;
            if (request.part.case === "chunk") r.received.push(request.part.value[0]!);
            await behaviour.submitFile?.();
          }
          return {};
        },
      });
      router.service(authv1.AuthService, {
        async getJwks() {
          r.calls++;
          await behaviour.jwks?.();
          return { jwksJson: "{}", issuer: `replica-${r.port}` };
        },
        async createPartner() {
          r.calls++;
          await behaviour.createPartner?.();
          return { partnerId: `ptr_${r.port}` };
        },
      });
    },
  });
  const server = http2.createServer(handler);
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  r.port = (server.address() as AddressInfo).port;
  r.goAway = () => {
    for (const s of sessions) s.close();
  };
  r.die = () => {
    server.close();
    for (const socket of sockets) socket.destroy();
  };
  r.kill = async () => {
    for (const s of sessions) s.socket?.resetAndDestroy?.() ?? s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  live.push(r);
  return r;
}

const live: Replica[] = [];
const transports: BalancedTransport[] = [];
afterEach(async () => {
  await Promise.allSettled(live.splice(0).map((r) => r.kill()));
  transports.splice(0).forEach((t) => t.close());
});

function client(urls: string, opts: Partial<ConstructorParameters<typeof BalancedTransport>[0]> = {}) {
  const transport = new BalancedTransport({ urls, defaultTimeoutMs: 5_000, ...opts });
  transports.push(transport);
  return createClient(authv1.AuthService, transport);
}

const url = (port: number) => `http://127.0.0.1:${port}`;
/** A port nothing listens on: taken by a server that is then closed. */
async function closedPort(): Promise<number> {
  const r = await replica();
  await r.kill();
  live.splice(live.indexOf(r), 1);
  return r.port;
}
const never = () => new Promise<void>(() => {});

describe("internal clients over every replica", () => {
  it("balance calls across the replicas of a comma-separated *_SERVICE_URL", async () => {
    const [a, b] = [await replica(), await replica()];
    const auth = client(`${url(a.port)},${url(b.port)}`);
    for (let i = 0; i < 10; i++) await auth.getJwks({});
    expect([a.calls, b.calls]).toEqual([5, 5]);
  });

  it("each method's calls alternate between the replicas, whatever other calls come between them (an upload's quota check before every SubmitFile)", async () => {
    const [a, b] = [await replica(), await replica()];
    const auth = client(`${url(a.port)},${url(b.port)}`);
    const partners: string[] = [];
    for (let i = 0; i < 6; i++) {
      await auth.getJwks({});
      partners.push((await auth.createPartner({ name: "x" })).partnerId);
    }
    expect(partners.filter((p) => p === `ptr_${a.port}`)).toHaveLength(3);
    expect(partners.filter((p) => p === `ptr_${b.port}`)).toHaveLength(3);
  });

  it("a replica that was not listening yet takes its share of the calls once it listens, after the cooldown", async () => {
    const late = await closedPort();
    const b = await replica();
    const auth = client(`${url(late)},${url(b.port)}`, { failureCooldownMs: 50 });
    for (let i = 0; i < 4; i++) expect((await auth.getJwks({})).issuer).toBe(`replica-${b.port}`);
    const a = await replica({}, late);
    await new Promise((r) => setTimeout(r, 60)); // the cooldown of the refusals above
    for (let i = 0; i < 10; i++) await auth.getJwks({});
    expect([a.calls, b.calls]).toEqual([5, 9]);
  });

  it("a call to a replica that refuses connections is made on another one, whatever the method", async () => {
    const b = await replica();
    const auth = client(`${url(await closedPort())},${url(b.port)}`);
    for (let i = 0; i < 4; i++) {
      expect((await auth.createPartner({ name: "x" })).partnerId).toBe(`ptr_${b.port}`);
      expect((await auth.getJwks({})).issuer).toBe(`replica-${b.port}`);
    }
  });

  it("a read whose replica dies under it is answered by another replica", async () => {
    const a = await replica({ jwks: never });
    const b = await replica();
    const auth = client(`${url(a.port)},${url(b.port)}`);
    const answers = Promise.all([auth.getJwks({}), auth.getJwks({})]);
    while (a.calls === 0) await new Promise((r) => setTimeout(r, 5));
    await a.kill();
    const started = Date.now();
    expect((await answers).map((x) => x.issuer)).toEqual([`replica-${b.port}`, `replica-${b.port}`]);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it("a replica that died while its connection was quiet is passed over at once, though the call comes before the connection's end is read", async () => {
    // A connection quiet for longer than the PING interval is verified with a PING before a call
    // goes on it. When the replica's end of the connection (a FIN: the process was killed while
    // nothing was in flight) is read while that PING is pending, the connection closes without an
    // error, and connect-node's verification never settled: the call waited for its deadline, then
    // failed as DeadlineExceeded, which is no reason to try another replica (a 503 at the gateway
    // right after an auth replica was killed), and every later verification on that replica waited
    // for the same never-settled one (connectrpc/connect-es#1746). A connection without calls is now
    // closed before it is quiet for that long, so the call connects afresh and is refused at once.
    const a = await replica();
    const b = await replica();
    const auth = client(`${url(a.port)},${url(b.port)}`, { pingIntervalMs: 20, failureCooldownMs: 50 });
    expect((await auth.getJwks({})).issuer).toBe(`replica-${a.port}`);
    expect((await auth.getJwks({})).issuer).toBe(`replica-${b.port}`);
    await new Promise((r) => setTimeout(r, 60)); // both connections quiet for longer than the PING interval
    a.die();
    // Made in the same turn of the event loop: the FIN is not read yet, the next call's turn is a's.
    expect((await auth.getJwks({}, { timeoutMs: 3_000 })).issuer).toBe(`replica-${b.port}`);

    // a comes back on its port: once its cooldown is over it is reached again, also after its
    // connection was quiet (a verification of its own, not the one that never settled).
    const back = await replica({}, a.port);
    await new Promise((r) => setTimeout(r, 60));
    for (let i = 0; i < 2 && back.calls === 0; i++) await auth.getJwks({}, { timeoutMs: 3_000 });
    expect(back.calls).toBe(1);
    await new Promise((r) => setTimeout(r, 60));
    const issuers = new Set<string>();
    for (let i = 0; i < 2; i++) issuers.add((await auth.getJwks({}, { timeoutMs: 3_000 })).issuer);
    expect(issuers).toEqual(new Set([`replica-${a.port}`, `replica-${b.port}`]));
  });

  it("a call that is not idempotent is not made twice when its replica dies under it: the caller gets Unavailable", async () => {
    const a = await replica({ createPartner: never });
    const b = await replica();
    const auth = client(`${url(a.port)},${url(b.port)}`);
    const calls = [auth.createPartner({ name: "x" }), auth.createPartner({ name: "y" })].map((p) =>
      p.then(
        (r) => r.partnerId,
        (e: unknown) => RpcError.from(e).code,
      ),
    );
    while (a.calls === 0) await new Promise((r) => setTimeout(r, 5));
    await a.kill();
    expect((await Promise.all(calls)).sort()).toEqual([Status.UNAVAILABLE, `ptr_${b.port}`].sort());
    expect(b.calls).toBe(1);
  });

  it("an upload (a client stream) whose replica dies under it fails fast as Unavailable; one that never reached a replica goes to another", async () => {
    const a = await replica({ submitFile: never });
    const b = await replica();
    const transport = new BalancedTransport({ urls: `${url(a.port)},${url(b.port)}`, defaultTimeoutMs: 10_000 });
    transports.push(transport);
    const files = createClient(fileintakev1.FileIntakeService, transport);
    async function* chunks() {
      yield { part: { case: "chunk" as const, value: new Uint8Array(8) } };
      await new Promise((r) => setTimeout(r, 60_000));
    }
    const upload = files.submitFile(chunks()).then(
      () => "answered",
      (e: unknown) => RpcError.from(e).code,
    );
    while (a.calls === 0) await new Promise((r) => setTimeout(r, 5));
    const started = Date.now();
    await a.kill();
    expect(await upload).toBe(Status.UNAVAILABLE);
    expect(Date.now() - started).toBeLessThan(1_000);

    const viaClosedTransport = new BalancedTransport({
      urls: `${url(await closedPort())},${url(b.port)}`,
      defaultTimeoutMs: 5_000,
    });
    transports.push(viaClosedTransport);
    const viaClosed = createClient(fileintakev1.FileIntakeService, viaClosedTransport);
    for (let i = 0; i < 2; i++)
      await viaClosed.submitFile(
        (async function* () {
          yield { part: { case: "chunk" as const, value: new Uint8Array(8) } };
        })(),
      );
    expect(b.calls).toBe(2);
    // The attempt on the closed port took nothing from the input, so the retry sends all of it.
    expect(b.messages).toBe(2);
  });

  it("an upload whose first replica refuses its stream while the next message is still being read reaches the next replica whole and in order", async () => {
    // A replica that accepts the connection and refuses each stream a moment later (REFUSED_STREAM:
    // nothing of it was processed), when the upload has sent its first message and waits for the next.
    const refusing = http2.createServer();
    const sessions = new Set<http2.Http2Session>();
    refusing.on("session", (session) => sessions.add(session));
    refusing.on("stream", (stream) => {
      stream.on("error", () => {});
      setTimeout(() => stream.close(http2.constants.NGHTTP2_REFUSED_STREAM), 100);
    });
    await new Promise<void>((resolve) => refusing.listen(0, "127.0.0.1", resolve));
    const b = await replica();
    const transport = new BalancedTransport({
      urls: `${url((refusing.address() as AddressInfo).port)},${url(b.port)}`,
      defaultTimeoutMs: 10_000,
    });
    transports.push(transport);
    const files = createClient(fileintakev1.FileIntakeService, transport);
    const chunk = (n: number) => ({ part: { case: "chunk" as const, value: new Uint8Array([n]) } });
    async function* upload() {
      yield chunk(1);
      await new Promise((r) => setTimeout(r, 300)); // the refusal comes while this read is pending
      yield chunk(2);
      yield chunk(3);
    }
    const answer = await files.submitFile(upload()).then(
      () => "answered",
      (e: unknown) => String(e),
    );
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => refusing.close(resolve));
    expect(answer).toBe("answered");
    expect(b.received).toEqual([1, 2, 3]);
  });

  it("an answer of the service (an error it sent) is not repeated on another replica", async () => {
    const unavailable = () => Promise.reject(new RpcError("database unreachable", Status.UNAVAILABLE));
    const [a, b] = [await replica({ jwks: unavailable }), await replica({ jwks: unavailable })];
    const auth = client(`${url(a.port)},${url(b.port)}`);
    await expect(auth.getJwks({})).rejects.toMatchObject({ code: Status.UNAVAILABLE });
    expect(a.calls + b.calls).toBe(1);
  });

  it("every replica gone: Unavailable within a second, not at the deadline", async () => {
    const auth = client(`${url(await closedPort())},${url(await closedPort())}`, { defaultTimeoutMs: 10_000 });
    const started = Date.now();
    await expect(auth.getJwks({})).rejects.toMatchObject({ code: Status.UNAVAILABLE });
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it("a client made before its service started reaches it as soon as it listens (services started after the gateway)", async () => {
    const port = await closedPort();
    const auth = client(url(port));
    await expect(auth.getJwks({})).rejects.toMatchObject({ code: Status.UNAVAILABLE });
    await expect(auth.getJwks({})).rejects.toMatchObject({ code: Status.UNAVAILABLE });
    await replica({}, port);
    const started = Date.now();
    expect((await auth.getJwks({}, { timeoutMs: 1_500 })).issuer).toBe(`replica-${port}`);
    expect(Date.now() - started).toBeLessThan(500);
  });

  it("a service restarted under a long-lived client is reached again at once", async () => {
    const first = await replica();
    const auth = client(url(first.port));
    expect((await auth.getJwks({})).issuer).toBe(`replica-${first.port}`);
    await first.kill();
    await expect(auth.getJwks({})).rejects.toMatchObject({ code: Status.UNAVAILABLE });
    await replica({}, first.port);
    expect((await auth.getJwks({}, { timeoutMs: 1_500 })).issuer).toBe(`replica-${first.port}`);
  });

  it("a replica that says GOAWAY on an idle connection (a pod shutting down) costs no call and raises no uncaught error", async () => {
    // connect-node destroys an idle connection on GOAWAY; Node raises that error once the socket has
    // closed, and a call made in between used to leave it without a listener: the process crashed
    // (connectrpc/connect-es#1768); every connection a call went on now has a listener of our own.
    // Calls at growing delays after the GOAWAY hit that window.
    const first = await replica();
    const auth = client(url(first.port));
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on("uncaughtException", onUncaught);
    const spin = (ms: number) =>
      new Promise<void>((resolve) => {
        const until = performance.now() + ms;
        const check = () => (performance.now() >= until ? resolve() : setImmediate(check));
        check();
      });
    try {
      for (let delayMs = 0; delayMs < 15; delayMs += 0.25) {
        expect((await auth.getJwks({})).issuer).toBe(`replica-${first.port}`);
        await new Promise((r) => setTimeout(r, 5)); // the connection is idle
        first.goAway();
        await spin(delayMs);
        expect((await auth.getJwks({})).issuer).toBe(`replica-${first.port}`);
      }
      await new Promise((r) => setTimeout(r, 100));
      expect(uncaught).toEqual([]);
    } finally {
      process.off("uncaughtException", onUncaught);
    }
  });
});

describe("what a call leaves behind", () => {
  it("calls to a service by host name leave no timer per call pending once they are answered (none for their deadline, none for the first lookup)", async () => {
    const r = await replica();
    const endpoints = new ServiceEndpoints(`http://auth-headless:${r.port}`, { lookup: async () => ["127.0.0.1"] });
    const auth = client(`http://auth-headless:${r.port}`, { endpoints, defaultTimeoutMs: 60_000 });
    await auth.getJwks({}); // the first call waits for the first lookup

    const pending = new Set<number>();
    const hook = createHook({
      init(id, type) {
        if (type === "Timeout") pending.add(id);
      },
      destroy(id) {
        pending.delete(id);
      },
    }).enable();
    try {
      for (let i = 0; i < 20; i++) await auth.getJwks({});
      // destroy hooks of cleared timers run after the current tick
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      hook.disable();
      endpoints.close();
    }
    expect(r.calls).toBe(21);
    // What may stay: one per connection and server (the session's idle timer, the Date header's
    // cache), never one per call.
    expect(pending.size).toBeLessThan(5);
  });
});

describe("service addresses", () => {
  it("a *_SERVICE_URL is one base URL or a comma-separated list of them", () => {
    expect(parseServiceUrls("http://a:1,http://10.0.0.2:2").map(String)).toEqual(["http://a:1/", "http://10.0.0.2:2/"]);
    expect(() => parseServiceUrls("http://a:1,")).toThrow(/comma-separated/);
    expect(() => parseServiceUrls("https://a:1")).toThrow(/http:\/\//);
    expect(() => parseServiceUrls("http://a:1/path")).toThrow(/base URL/);
    expect(() => parseServiceUrls("nope")).toThrow(/not a URL/);
  });

  it("a host name stands for all its addresses, looked up again periodically; a failed lookup keeps the last ones", async () => {
    const answers: (string[] | Error)[] = [["10.0.0.1", "10.0.0.2"], ["10.0.0.2", "fd00::3"], new Error("SERVFAIL")];
    const lookup = async () => {
      const next = answers.shift()!;
      if (next instanceof Error) throw next;
      return next;
    };
    const endpoints = new ServiceEndpoints("http://auth-headless:50051,http://127.0.0.1:9", {
      resolveEveryMs: 60_000,
      minResolveGapMs: 0,
      lookup,
    });
    try {
      expect(endpoints.origins()).toEqual(["http://127.0.0.1:9"]);
      await endpoints.ready();
      expect(endpoints.origins()).toEqual(["http://10.0.0.1:50051", "http://10.0.0.2:50051", "http://127.0.0.1:9"]);
      await endpoints.refresh();
      expect(endpoints.origins()).toEqual(["http://10.0.0.2:50051", "http://[fd00::3]:50051", "http://127.0.0.1:9"]);
      await endpoints.refresh();
      expect(endpoints.origins()).toEqual(["http://10.0.0.2:50051", "http://[fd00::3]:50051", "http://127.0.0.1:9"]);
    } finally {
      endpoints.close();
    }
  });

  it("classifies failures: refused (never sent), reset (lost with the connection), an answer", () => {
    const refused = new RpcError(
      "x",
      Status.UNAVAILABLE,
      undefined,
      undefined,
      Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }),
    );
    const reset = new RpcError(
      "x",
      Status.ABORTED,
      undefined,
      undefined,
      Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }),
    );
    const answered = new RpcError("db down", Status.UNAVAILABLE, new Headers({ "grpc-status": "14" }));
    expect([classifyFailure(refused), classifyFailure(reset), classifyFailure(answered)]).toEqual([
      "never-reached",
      "connection-broke",
      "answered",
    ]);
  });

  it("takes an Unimplemented answer for a call that never reached a replica: the server at that address is another service's", () => {
    const stranger = new RpcError(
      "The server does not implement the method",
      Status.UNIMPLEMENTED,
      new Headers({ "grpc-status": "12" }),
    );
    expect(classifyFailure(stranger)).toBe("never-reached");
  });
});
