// The bare baselines of `npm run bench` for the gateway's two hottest requests, as one Koa process
// doing only the essential work of each (nothing else: no database, no other service, no logs):
//
//   GET /v1/files/:id   verifies the same ES256 bearer as the gateway (jose, the same claims checks)
//                       and answers the JSON the system answered for that file (held in memory).
//   GET /v1/connections/:id   the same for a connection (scope connections:write).
//   POST /oauth/token   parses the form (@koa/bodyparser, as the gateway), HMAC-SHA256-hashes the
//                       secret with a pepper, compares it in constant time, signs an ES256 JWT of the
//                       same claims (jose) and answers the same token response (token-issuer.mjs).
//   POST /floor/oauth/token   the floor of the system's shape: the same form, then one bare gRPC call
//                       (the services' grpc-js client, unsigned) to the bare auth service at AUTH_BASELINE_URL
//                       (auth-baseline.mjs), which does the token work; only when that is set.
//
// The bench configures it over two control routes before measuring:
//   PUT /_bench/keys   { jwks, issuer, audience, clients: [{ client_id, client_secret, partner_id, scope }] }
//   PUT /_bench/files/:id, PUT /_bench/connections/:id   the exact JSON body to answer for that resource
// It prints its port on stdout ("listening <port>") once ready.
import Koa from "koa";
import { bodyParser } from "@koa/bodyparser";
import { serviceClient } from "@pi/common/rpc/client";
import { createLocalJWKSet, jwtVerify } from "jose";
import { authv1 } from "@pi/proto";
import { createTokenIssuer } from "./token-issuer.mjs";

const tokens = await createTokenIssuer();
const auth = process.env.AUTH_BASELINE_URL
  ? serviceClient(authv1.AuthService, process.env.AUTH_BASELINE_URL)
  : undefined;

let verifyKeys;
let issuer = "";
let audience = "";
const files = new Map();
const bearer = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i;
// The resources answered from memory: the path's prefix, the id's shape and the scope a token needs.
const resources = {
  files: { prefix: "/v1/files/", id: /^file_[0-9A-Za-z]{22}$/, scope: "files:write", bodies: files },
  connections: {
    prefix: "/v1/connections/",
    id: /^con_[0-9A-Za-z]{1,64}$/,
    scope: "connections:write",
    bodies: new Map(),
  },
};

const readJson = async (req) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
};

const form = bodyParser({ enableTypes: ["json", "form"], jsonLimit: "16kb", formLimit: "16kb" });

const app = new Koa();
app.use(async (ctx, next) => {
  const path = ctx.path;
  const resource =
    ctx.method === "GET"
      ? path.startsWith("/v1/files/")
        ? resources.files
        : path.startsWith("/v1/connections/")
          ? resources.connections
          : undefined
      : undefined;
  if (resource) {
    const m = bearer.exec(ctx.get("authorization"));
    let ok = false;
    if (m && verifyKeys) {
      try {
        const { payload } = await jwtVerify(m[1], verifyKeys, {
          issuer,
          audience,
          algorithms: ["ES256"],
          typ: "at+jwt",
          requiredClaims: ["sub", "exp", "iat", "jti"],
        });
        ok =
          typeof payload.sub === "string" &&
          typeof payload.scope === "string" &&
          payload.scope.split(" ").includes(resource.scope);
      } catch {
        ok = false;
      }
    }
    if (!ok) {
      ctx.status = 401;
      ctx.body = { error: { type: "authentication_error", code: "invalid_token" } };
      return;
    }
    const id = path.slice(resource.prefix.length);
    const body = resource.id.test(id) ? resource.bodies.get(id) : undefined;
    if (!body) {
      ctx.status = 404;
      ctx.body = { error: { type: "invalid_request_error", code: "not_found" } };
      return;
    }
    ctx.body = body;
    return;
  }
  if (ctx.method === "POST" && (path === "/oauth/token" || (auth && path === "/floor/oauth/token"))) {
    ctx.set("Cache-Control", "no-store");
    ctx.set("Pragma", "no-cache");
    await form(ctx, async () => {});
    const b = ctx.request.body ?? {};
    let t;
    if (b.grant_type === "client_credentials") {
      if (path === "/oauth/token") t = await tokens.issue(b.client_id, b.client_secret);
      else {
        const res = await auth.issueToken({
          clientId: String(b.client_id ?? ""),
          clientSecret: String(b.client_secret ?? ""),
        });
        if (res.outcome.case === "token")
          t = {
            access_token: res.outcome.value.accessToken,
            expires_in: Number(res.outcome.value.expiresIn),
            scope: res.outcome.value.scope,
          };
      }
    }
    if (!t) {
      ctx.status = 400;
      ctx.body = { error: "invalid_client", error_description: "Client authentication failed." };
      return;
    }
    ctx.body = { access_token: t.access_token, token_type: "Bearer", expires_in: t.expires_in, scope: t.scope };
    return;
  }
  if (ctx.method === "PUT" && path === "/_bench/keys") {
    const cfg = await readJson(ctx.req);
    verifyKeys = createLocalJWKSet(cfg.jwks);
    issuer = cfg.issuer;
    audience = cfg.audience;
    tokens.addClients(cfg.clients ?? []);
    ctx.status = 204;
    return;
  }
  const put = ctx.method === "PUT" && /^\/_bench\/(files|connections)\/(.+)$/.exec(path);
  if (put) {
    resources[put[1]].bodies.set(put[2], await readJson(ctx.req));
    ctx.status = 204;
    return;
  }
  await next();
});

const server = app.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
server.keepAliveTimeout = 65_000; // the gateway's (http-sink.mjs says why it matters)
process.on("SIGTERM", () => server.close(() => process.exit(0)));
process.on("disconnect", () => process.exit(0));
