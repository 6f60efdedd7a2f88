// What one internal call costs: the same unary AuthService.IssueToken (a fixed answer, no work)
// served by the services' grpc-js server (services/common/src/rpc/server.ts: identity, allow-list,
// span, metric) and called by their grpc-js client (rpc/client.ts, a signed token on each call), and
// as a bare node:http2 request of the same bytes (the floor of any call). The server is this script forked with `serve`; the client is this script.
// Prints one JSON line per variant: calls/s at CONCURRENCY calls in flight, and the CPU per call of
// the client and of the server (process.cpuUsage, all threads).
import { fork } from "node:child_process";
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { createLogger } from "@pi/common/runtime/logger";
import { generateIdentity } from "@pi/common/rpc/service-identity";
import { serviceClient } from "@pi/common/rpc/client";
import { startRpcServer } from "@pi/common/rpc/server";
import { WORKLOADS } from "@pi/common/rpc/allowed-callers";
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
  const server = await startRpcServer({
    service: "auth",
    publicKeys: process.env.HOP_PUBLIC_KEYS,
    host: "127.0.0.1",
    port: 0,
    routes,
    healthy: async () => true,
    logger: createLogger("auth", "silent"),
  });
  const grpcPort = server.port;
  const rawAnswer = toBinary(authv1.IssueTokenResponseSchema, create(authv1.IssueTokenResponseSchema, answer));
  const raw = (req, res) => {
    req.on("data", () => {});
    req.on("end", () => {
      res.writeHead(200, { "content-type": "application/proto" });
      res.end(rawAnswer);
    });
  };
  const h2 = http2.createServer(raw);
  await new Promise((r) => h2.listen(0, "127.0.0.1", r));
  process.send({ h2: h2.address().port, grpc: grpcPort });
  process.on("message", (m) => {
    if (m === "cpu") {
      const u = process.cpuUsage();
      process.send({ cpuUs: u.user + u.system });
    }
  });
  process.on("disconnect", () => process.exit(0));
} else {
  const ids = Object.fromEntries(WORKLOADS.map((w) => [w, generateIdentity(w)]));
  const publicKeys = Object.values(ids)
    .map((id) => id.publicKey)
    .join(",");
  const server = fork(new URL(import.meta.url).pathname, ["serve"], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    env: { ...process.env, HOP_PUBLIC_KEYS: publicKeys },
  });
  const next = () => new Promise((r) => server.once("message", r));
  const ports = await next();
  const serverCpu = async () => {
    const reply = next();
    server.send("cpu");
    return (await reply).cpuUs;
  };
  const h2Url = `http://127.0.0.1:${ports.h2}`;
  const rawRequest = toBinary(authv1.IssueTokenRequestSchema, create(authv1.IssueTokenRequestSchema, request));
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
    "gRPC, grpc-js client -> grpc-js server (the services' rpc/client.ts and rpc/server.ts)": () => {
      const client = serviceClient(authv1.AuthService, `http://127.0.0.1:${ports.grpc}`, ids.gateway.key);
      return () => client.issueToken(request);
    },
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
