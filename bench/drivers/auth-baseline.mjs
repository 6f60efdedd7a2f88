// The bare auth service of the token endpoint's floor (koa-baseline.mjs, POST /floor/oauth/token):
// the system's own AuthService contract served by a bare grpc-js server, IssueToken doing only the
// essential work (token-issuer.mjs), nothing else: no interceptors, database, logs or telemetry.
// Its clients come in BENCH_CLIENTS (JSON, as koa-baseline's PUT /_bench/keys takes them). It
// prints its port on stdout ("listening <port>") once ready.
import * as grpc from "@grpc/grpc-js";
import { deserialize, pathOf, serialize } from "@pi/common/rpc/client";
import { authv1 } from "@pi/proto";
import { createTokenIssuer } from "./token-issuer.mjs";

const issuer = await createTokenIssuer();
issuer.addClients(JSON.parse(process.env.BENCH_CLIENTS ?? "[]"));

const method = authv1.AuthService.method.issueToken;
async function issueToken(req) {
  const t = await issuer.issue(req.clientId, req.clientSecret);
  if (!t) return { outcome: { case: "failure", value: authv1.TokenFailure.INVALID_CLIENT } };
  return {
    outcome: { case: "token", value: { accessToken: t.access_token, expiresIn: BigInt(t.expires_in), scope: t.scope } },
  };
}
const server = new grpc.Server();
server.addService(
  {
    issueToken: {
      path: pathOf(method),
      requestStream: false,
      responseStream: false,
      requestSerialize: serialize(method.input),
      requestDeserialize: deserialize(method.input),
      responseSerialize: serialize(method.output),
      responseDeserialize: deserialize(method.output),
    },
  },
  { issueToken: (call, callback) => issueToken(call.request).then((res) => callback(null, res), callback) },
);
server.bindAsync(`127.0.0.1:${Number(process.env.PORT ?? 0)}`, grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) throw err;
  process.stdout.write(`listening ${port}\n`);
});
process.on("SIGTERM", () => server.tryShutdown(() => process.exit(0)));
process.on("disconnect", () => process.exit(0));
