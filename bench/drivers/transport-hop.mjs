// What one internal call costs, by protocol: the same unary AuthService.IssueToken (a fixed answer,
// no work) served by connectNodeAdapter and by grpc-js through the services' adapter
// (services/common/src/grpc-server.ts, what the services serve with), called over gRPC by
// connect-node and by grpc-js, over the Connect protocol (HTTP/2 and HTTP/1.1, binary), and as a
// bare node:http2 request of the same bytes (the floor of any call). The server is this script forked with `serve`; the client is this script.
// Prints one JSON line per variant: calls/s at CONCURRENCY calls in flight, and the CPU per call of
// the client and of the server (process.cpuUsage, all threads).
import { fork } from "node:child_process";
import http from "node:http";
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import { collectRoutes, grpcHandlers, grpcMethodDefinition } from "@pi/common";
import { authv1 } from "@pi/proto";

const SECONDS = Number(process.env.HOP_SECONDS ?? 4);
const CONCURRENCY = Number(process.env.HOP_CONCURRENCY ?? 8);
const answer = {
  outcome: {
    case: "token",
    value: { accessToken: "x".repeat(600), expiresIn: 900n, scope: "connections:write files:write" },
  },
};
const request = { clientId: "client", clientSecret: "secret" };

if (process.argv[2] === "serve") {
  const routes = (router) => router.service(authv1.AuthService, { issueToken: async () => answer });
  const connect = connectNodeAdapter({ routes });
  const grpcServer = new grpc.Server();
  const { definition, implementation } = grpcHandlers(collectRoutes(routes), []);
  grpcServer.addService(definition, implementation);
  const grpcPort = await new Promise((resolve, reject) =>
    grpcServer.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) =>
      err ? reject(err) : resolve(port),
    ),
  );
  const rawAnswer = toBinary(authv1.IssueTokenResponseSchema, create(authv1.IssueTokenResponseSchema, answer));
  const raw = (req, res) => {
    req.on("data", () => {});
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/proto" });
      res.end(rawAnswer);
    });
  };
  const h2 = http2.createServer((req, res) => (req.url === "/raw" ? raw(req, res) : connect(req, res)));
  const h1 = http.createServer(connect);
  h1.keepAliveTimeout = 65_000;
  await Promise.all([
    new Promise((r) => h2.listen(0, "127.0.0.1", r)),
    new Promise((r) => h1.listen(0, "127.0.0.1", r)),
  ]);
  process.send({ h2: h2.address().port, h1: h1.address().port, grpc: grpcPort });
  process.on("message", (m) => {
    if (m === "cpu") {
      const u = process.cpuUsage();
      process.send({ cpuUs: u.user + u.system });
    }
  });
  process.on("disconnect", () => process.exit(0));
} else {
  const server = fork(new URL(import.meta.url).pathname, ["serve"], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const next = () => new Promise((r) => server.once("message", r));
  const ports = await next();
  const serverCpu = async () => {
    const reply = next();
    server.send("cpu");
    return (await reply).cpuUs;
  };
  const h2Url = `http://127.0.0.1:${ports.h2}`;
  const rawRequest = toBinary(authv1.IssueTokenRequestSchema, create(authv1.IssueTokenRequestSchema, request));
  const viaConnect = (transport) => {
    const client = createClient(authv1.AuthService, transport);
    return () => client.issueToken(request);
  };
  const viaGrpcJs = (port) => {
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const method = grpcMethodDefinition(authv1.AuthService.method.issueToken);
    const message = create(authv1.IssueTokenRequestSchema, request);
    return () =>
      new Promise((resolve, reject) =>
        client.makeUnaryRequest(
          method.path,
          method.requestSerialize,
          method.responseDeserialize,
          message,
          new grpc.Metadata(),
          {},
          (err, res) => (err ? reject(err) : resolve(res)),
        ),
      );
  };
  const variants = {
    "bare node:http2 request": () => {
      const session = http2.connect(h2Url);
      return () =>
        new Promise((resolve, reject) => {
          const stream = session.request({ ":method": "POST", ":path": "/raw", "content-type": "application/proto" });
          stream.on("data", () => {});
          stream.on("end", resolve);
          stream.on("error", reject);
          stream.end(rawRequest);
        });
    },
    "Connect protocol, HTTP/1.1": () =>
      viaConnect(
        createConnectTransport({ baseUrl: `http://127.0.0.1:${ports.h1}`, httpVersion: "1.1", useBinaryFormat: true }),
      ),
    "Connect protocol, HTTP/2": () =>
      viaConnect(createConnectTransport({ baseUrl: h2Url, httpVersion: "2", useBinaryFormat: true })),
    "gRPC, connect-node client -> connect-node server": () => viaConnect(createGrpcTransport({ baseUrl: h2Url })),
    "gRPC, connect-node client -> grpc-js server (the services' adapter)": () =>
      viaConnect(createGrpcTransport({ baseUrl: `http://127.0.0.1:${ports.grpc}` })),
    "gRPC, grpc-js client -> connect-node server": () => viaGrpcJs(ports.h2),
    "gRPC, grpc-js client -> grpc-js server (the services' adapter)": () => viaGrpcJs(ports.grpc),
  };
  for (const [name, make] of Object.entries(variants)) {
    const call = make();
    for (let i = 0; i < 2_000; i++) await call(); // warm-up
    const client0 = process.cpuUsage();
    const server0 = await serverCpu();
    const started = performance.now();
    const until = started + SECONDS * 1000;
    let calls = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (performance.now() < until) {
          await call();
          calls++;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const client = process.cpuUsage(client0);
    const server = (await serverCpu()) - server0;
    process.stdout.write(
      `${JSON.stringify({ name, callsPerSecond: calls / seconds, clientCpuMsPerCall: (client.user + client.system) / 1000 / calls, serverCpuMsPerCall: server / 1000 / calls })}\n`,
    );
  }
  server.disconnect();
  process.exit(0);
}
