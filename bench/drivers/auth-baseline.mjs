// The bare auth service of the token endpoint's floor (koa-baseline.mjs, POST /floor/oauth/token):
// the system's own AuthService contract served by Connect on node:http2, IssueToken doing only the
// essential work (token-issuer.mjs), nothing else: no interceptors, database, logs or telemetry.
// Its clients come in BENCH_CLIENTS (JSON, as koa-baseline's PUT /_bench/keys takes them). It
// prints its port on stdout ("listening <port>") once ready.
import http2 from "node:http2";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { authv1 } from "@pi/proto";
import { createTokenIssuer } from "./token-issuer.mjs";

const issuer = await createTokenIssuer();
issuer.addClients(JSON.parse(process.env.BENCH_CLIENTS ?? "[]"));

const handler = connectNodeAdapter({
  routes: (router) =>
    router.service(authv1.AuthService, {
      async issueToken(req) {
        const t = await issuer.issue(req.clientId, req.clientSecret);
        if (!t) return { outcome: { case: "failure", value: authv1.TokenFailure.INVALID_CLIENT } };
        return {
          outcome: {
            case: "token",
            value: { accessToken: t.access_token, expiresIn: BigInt(t.expires_in), scope: t.scope },
          },
        };
      },
    }),
});

const server = http2.createServer(handler);
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
process.on("disconnect", () => process.exit(0));
