import Koa from "koa";
import type {
  AuthClient,
  ConnectionClient,
  FileIntakeClient,
  HealthClient,
  WebhookClient,
} from "@pi/common/rpc/clients";
import type { Logger } from "@pi/common/runtime/logger";
import type { Settings } from "@pi/common/runtime/settings";
import type { BearerVerifier } from "./bearer.js";
import { deprecations } from "./deprecation.js";
import { partnerRateLimit } from "./rate-limit.js";
import discoveryRoutes from "./routes/discovery.js";
import docsRoutes from "./routes/docs.js";
import { routeTemplates, traceRequests } from "./tracing.js";
import { PartnerError } from "./errors.js";
import { handleErrors, requireBearer } from "./middleware.js";
import connectionRoutes, { testHelperRoutes, testModeOnly } from "./routes/connections.js";
import eventRoutes from "./routes/events.js";
import fileRoutes from "./routes/files.js";
import healthRoutes from "./routes/health.js";
import tokenRoutes from "./routes/token.js";
import { batchedConnectionReads, batchedTokenIssuer } from "./batches.js";
import { allowedMethods, type GatewayState } from "./router.js";

export interface GatewayDeps {
  settings: Settings;
  logger: Logger;
  auth: AuthClient;
  connections: ConnectionClient;
  files: FileIntakeClient;
  webhooks: WebhookClient;
  verifier: BearerVerifier;
  health: Record<string, HealthClient>;
  /** False until the gateway holds the token keys and the revocation list; /v1 answers 503 until then. */
  warm?: () => boolean;
}

export function createApp(deps: GatewayDeps): Koa<GatewayState> {
  // X-Forwarded-For is read only behind trusted proxies, and only as many entries as they append.
  const hops = deps.settings.TRUSTED_PROXY_HOPS;
  const app = new Koa<GatewayState>({ proxy: hops > 0, maxIpsCount: hops });
  app.silent = true;
  const warm = deps.warm ?? (() => true);
  const health = healthRoutes(deps.health, warm);
  const token = tokenRoutes(batchedTokenIssuer(deps.auth), deps.settings.RATE_LIMIT_TOKEN_PER_MINUTE);
  const v1 = [
    connectionRoutes(deps.connections, batchedConnectionReads(deps.connections), deps.settings.ADDRESS_DOMAIN),
    fileRoutes(deps.files, deps.settings),
    eventRoutes(deps.webhooks),
  ];

  const testHelpers = testHelperRoutes(deps.connections);

  const docs = docsRoutes();
  const discovery = discoveryRoutes(deps.settings);
  app.use(traceRequests(routeTemplates([health, docs, discovery, token, ...v1, testHelpers])));
  app.use(handleErrors(deps.logger));
  app.use(deprecations(deps.settings.API_DEPRECATIONS));
  app.use(health.routes());
  app.use(docs.routes());
  app.use(discovery.routes());
  app.use(allowedMethods(discovery));
  app.use(token.routes());
  app.use(allowedMethods(token));
  // The per-partner limit needs the partner: it runs after the bearer check (a 401 costs no budget).
  const bearer = requireBearer(deps.verifier);
  const partnerLimit = partnerRateLimit(deps.settings.RATE_LIMIT_V1_PER_SECOND);
  app.use(async (ctx, next) => {
    if (!ctx.path.startsWith("/v1/")) return next();
    if (!warm()) throw new PartnerError("service_unavailable", { headers: { "Retry-After": "1" } });
    return bearer(ctx, () => partnerLimit(ctx, next));
  });
  for (const router of v1) {
    app.use(router.routes());
    app.use(allowedMethods(router));
  }
  app.use(testModeOnly(testHelpers));
  return app;
}
