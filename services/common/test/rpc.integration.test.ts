import { afterEach, describe, expect, it } from "@jest/globals";
import { connect, createServer, type Server, type Socket } from "node:net";
import { authv1, fileintakev1 } from "@pi/proto";
import { ErrorReason, reasonOf, RpcError, serviceError, Status } from "../src/rpc/errors.js";
import { closeClient, serviceClient } from "../src/rpc/client.js";
import type { RpcServer } from "../src/rpc/server.js";
import { parseServiceUrls, targetOf } from "../src/rpc/service-urls.js";
import { serveForTest, testIdentityKey } from "../../../test/support/local-client.js";

// Replicas of a service: the real gRPC server (rpc/server.ts), each behind a TCP proxy the test can
// cut as a killed process would; the client is the one every service uses (rpc/client.ts).

interface Replica {
  port: number;
  calls: number;
  /** Messages its handler has read from client streams. */
  messages: number;
  /** Resets every connection and stops listening, as the kernel does for a killed process. */
  kill(): Promise<void>;
}

type Behaviour = { read?: () => Promise<void>; take?: () => Promise<void>; submitFile?: () => Promise<void> };

const servers: (RpcServer | Server)[] = [];
const clients: object[] = [];
/** The client every service uses, closed after the test. */
const client = <T extends object>(c: T): T => {
  clients.push(c);
  return c;
};
const live: Replica[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) closeClient(c);
  await Promise.allSettled(live.splice(0).map((r) => r.kill()));
  await Promise.allSettled(servers.splice(0).map((s) => ("port" in s ? s.close() : new Promise((r) => s.close(r)))));
});

async function replica(behaviour: Behaviour = {}): Promise<Replica> {
  const r = { calls: 0, messages: 0 } as Replica;
  const server = await serveForTest("file-intake", (router) => {
    router.service(fileintakev1.FileIntakeService, {
      async submitFile(requests) {
        r.calls++;
        for await (const _ of requests) {
          r.messages++;
          await behaviour.submitFile?.();
        }
        return {};
      },
    });
    router.service(fileintakev1.FileIntakeService, {
      async getFile() {
        r.calls++;
        await behaviour.read?.();
        return { file: { id: `replica-${r.port}` } };
      },
      async takeFileForExtraction() {
        r.calls++;
        await behaviour.take?.();
        return { holder: `replica-${r.port}` };
      },
    });
  });
  servers.push(server);
  const sockets = new Set<Socket>();
  // A proxy whose sockets the test can reset.
  const front = createServer((socket) => {
    const back = connect(server.port, "127.0.0.1");
    for (const s of [socket, back]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    socket.pipe(back).pipe(socket);
    socket.on("close", () => back.destroy());
    back.on("close", () => socket.resetAndDestroy());
  });
  await new Promise<void>((resolve) => front.listen(0, "127.0.0.1", resolve));
  r.port = (front.address() as { port: number }).port;
  r.kill = async () => {
    front.close();
    for (const s of sockets) s.resetAndDestroy();
  };
  live.push(r);
  return r;
}

const url = (port: number) => `http://127.0.0.1:${port}`;
const never = () => new Promise<void>(() => {});
/** A client of the replicas: as the gateway (reads, uploads) and as extraction (takes: not idempotent). */
const files = (urls: string) => ({
  ...client(serviceClient(fileintakev1.FileIntakeService, urls, testIdentityKey("gateway"))),
  takeFileForExtraction: client(serviceClient(fileintakev1.FileIntakeService, urls, testIdentityKey("extraction")))
    .takeFileForExtraction,
});
const auth = (urls: string) => client(serviceClient(authv1.AuthService, urls, testIdentityKey("gateway")));
const until = async (check: () => boolean) => {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
};
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => "answered",
    (e: unknown) => Status[RpcError.from(e).code],
  );

describe("internal clients over every replica (grpc-js round_robin)", () => {
  it("balance calls across the replicas of a comma-separated *_SERVICE_URL", async () => {
    const [a, b] = [await replica(), await replica()];
    const client = files(`${url(a.port)},${url(b.port)}`);
    // Once both connections are up (a first call connects to every replica), the calls alternate.
    while (a.calls === 0 || b.calls === 0) await client.getFile({});
    [a.calls, b.calls] = [0, 0];
    for (let i = 0; i < 6; i++) await client.getFile({});
    expect([a.calls, b.calls]).toEqual([3, 3]);
  });

  it("a call to a replica that refuses connections is made on another one, whatever the method", async () => {
    const b = await replica();
    const gone = await replica();
    await gone.kill();
    const client = files(`${url(gone.port)},${url(b.port)}`);
    for (let i = 0; i < 4; i++) {
      expect((await client.takeFileForExtraction({})).holder).toBe(`replica-${b.port}`);
      expect((await client.getFile({})).file?.id).toBe(`replica-${b.port}`);
    }
  });

  it("an idempotent call whose replica dies under it is answered by another replica, without waiting for a deadline", async () => {
    let reads = 0;
    const a = await replica({ read: () => (++reads > 0 ? never() : Promise.resolve()) });
    const b = await replica();
    const client = files(`${url(a.port)},${url(b.port)}`);
    const answers = Promise.all([client.getFile({}), client.getFile({}), client.getFile({})]);
    await until(() => a.calls > 0);
    const started = Date.now();
    await a.kill();
    expect((await answers).map((x) => x.file?.id)).toEqual(Array(3).fill(`replica-${b.port}`));
    expect(Date.now() - started).toBeLessThan(2_000); // a bound on a hang (the deadline is 10 s), not a speed
  });

  it("a call that is not idempotent is not made twice when its replica dies under it: the caller gets UNAVAILABLE", async () => {
    const a = await replica({ take: never });
    const b = await replica();
    const client = files(`${url(a.port)},${url(b.port)}`);
    while (a.calls === 0 || b.calls === 0) await client.getFile({}); // both connections up
    [a.calls, b.calls] = [0, 0];
    const calls = [client.takeFileForExtraction({}), client.takeFileForExtraction({})].map((p) =>
      p.then(
        (r) => r.holder,
        (e: unknown) => Status[RpcError.from(e).code],
      ),
    );
    await until(() => a.calls > 0 && b.calls > 0);
    await a.kill();
    expect((await Promise.all(calls)).sort()).toEqual(["UNAVAILABLE", `replica-${b.port}`].sort());
    expect(b.calls).toBe(1);
  });

  it("an upload (a client stream) whose replica dies under it fails fast as UNAVAILABLE", async () => {
    const a = await replica({ submitFile: never });
    async function* chunks() {
      yield { part: { case: "chunk" as const, value: new Uint8Array(8) } };
      await never();
    }
    const upload = codeOf(files(url(a.port)).submitFile(chunks()));
    await until(() => a.messages > 0);
    await a.kill();
    expect(await upload).toBe("UNAVAILABLE");
  });

  it("an upload moves at its reader's pace: a handler that stops reading stops the sender (back-pressure, no whole-body buffering)", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const a = await replica({ submitFile: () => held });
    let pulled = 0;
    async function* chunks() {
      for (let i = 0; i < 200; i++) {
        pulled++;
        yield { part: { case: "chunk" as const, value: new Uint8Array(64 * 1024) } };
      }
    }
    const upload = files(url(a.port)).submitFile(chunks());
    await until(() => a.messages === 1);
    const pulledWhileHeld = async () => {
      const seen = pulled;
      await new Promise((r) => setTimeout(r, 200)); // the sender has had time to run ahead, had it been free to
      return seen === pulled ? pulled : pulledWhileHeld();
    };
    // 200 messages (12.5 MiB) offered; what left the generator is bounded by HTTP/2's windows and the streams' buffers.
    expect(await pulledWhileHeld()).toBeLessThan(40);
    release();
    await upload;
    expect(a.messages).toBe(200);
  });

  it("an answer of the service is not repeated, UNAVAILABLE (its database unreachable) included, even for an idempotent call", async () => {
    const unreachable = Object.assign(new Error("no server"), { name: "MongoServerSelectionError" });
    const a = await replica({ read: () => Promise.reject(unreachable) });
    const client = files(url(a.port));
    expect(await codeOf(client.getFile({}))).toBe("UNAVAILABLE");
    expect(a.calls).toBe(1);
  });

  it("every replica gone: UNAVAILABLE at once, not at the deadline", async () => {
    const [a, b] = [await replica(), await replica()];
    await Promise.all([a.kill(), b.kill()]);
    const client = files(`${url(a.port)},${url(b.port)}`);
    const started = Date.now();
    expect(await codeOf(client.getFile({}))).toBe("UNAVAILABLE");
    expect(Date.now() - started).toBeLessThan(5_000); // a bound on a hang (the deadline is 10 s)
  });
});

describe("errors between services", () => {
  it("a service error's reason and parameter reach the caller with its status code; another failure is UNKNOWN", async () => {
    const server = await serveForTest("auth", (router) =>
      router.service(authv1.AuthService, {
        issueToken: (req) => {
          if (req.clientId === "boom") throw new Error("boom");
          throw serviceError(ErrorReason.INVALID_REQUEST, "bad name", "name");
        },
      }),
    );
    servers.push(server);
    const client = auth(url(server.port));
    const err = await client.issueToken({ clientId: "x" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RpcError);
    expect((err as RpcError).code).toBe(Status.INVALID_ARGUMENT);
    expect((err as RpcError).message).toBe("bad name");
    expect(reasonOf(err)).toEqual({ reason: ErrorReason.INVALID_REQUEST, param: "name" });
    expect(await codeOf(client.issueToken({ clientId: "boom" }))).toBe("UNKNOWN");
    expect(await codeOf(client.getJwks({}))).toBe("UNIMPLEMENTED");
  });

  it("a call its caller gives up is CANCELLED, and aborts the handler's signal", async () => {
    let started = false;
    let aborted: unknown;
    const server = await serveForTest("auth", (router) =>
      router.service(authv1.AuthService, {
        issueToken: (_req, { signal }) => {
          started = true;
          return new Promise((_, reject) =>
            signal.addEventListener("abort", () => {
              aborted = signal.reason;
              reject(aborted);
            }),
          );
        },
      }),
    );
    servers.push(server);
    const giveUp = new AbortController();
    const call = codeOf(auth(url(server.port)).issueToken({}, { signal: giveUp.signal }));
    // Given up once the handler runs (a fixed wait could give up before the call reached the server).
    await until(() => started);
    giveUp.abort();
    expect(await call).toBe("CANCELLED");
    await until(() => aborted !== undefined);
    expect((aborted as RpcError).code).toBe(Status.CANCELLED);
  });
});

describe("service addresses", () => {
  it("a *_SERVICE_URL is one base URL, or a list of IP addresses; a host name is left to grpc-js's dns resolver", () => {
    expect(targetOf("http://127.0.0.1:1,http://127.0.0.1:2")).toBe("ipv4:127.0.0.1:1,127.0.0.1:2");
    expect(targetOf("http://[::1]:5")).toBe("ipv6:[::1]:5");
    expect(targetOf("http://auth.pi.svc:50051")).toBe("dns:auth.pi.svc:50051");
    expect(() => parseServiceUrls("http://a:1,http://b:2")).toThrow("IP addresses");
    expect(() => parseServiceUrls("https://a:1")).toThrow("h2c");
    expect(() => parseServiceUrls("http://a:1/path")).toThrow("base URL");
    expect(() => parseServiceUrls("nope")).toThrow("not a URL");
  });
});
