import Koa from "koa";
import type { AuthClient, ConnectionClient, FileIntakeClient, HealthClient, Logger, Settings } from "@pi/common";
import type { BearerVerifier } from "./bearer.js";
import type { GatewayState } from "./context.js";
import { PartnerError } from "./errors.js";
import { handleErrors, requireBearer } from "./middleware.js";
import connectionRoutes from "./routes/connections.js";
import healthRoutes from "./routes/health.js";
import tokenRoutes from "./routes/token.js";

export interface GatewayDeps {
  settings: Settings;
  logger: Logger;
  auth: AuthClient;
  connections: ConnectionClient;
  files: FileIntakeClient;
  verifier: BearerVerifier;
  health: Record<string, HealthClient>;
}

export function createApp(deps: GatewayDeps): Koa<GatewayState> {
  const app = new Koa<GatewayState>({ proxy: false });
  app.silent = true;
  const health = healthRoutes(deps.health);
  const token = tokenRoutes(deps.auth);
  const v1 = [connectionRoutes(deps.connections, deps.settings.ADDRESS_DOMAIN)];

  app.use(handleErrors(deps.logger));
  app.use(health.routes());
  app.use(token.routes());
  app.use(token.allowedMethods({ throw: true, methodNotAllowed: () => new PartnerError("method_not_allowed") }));
  const bearer = requireBearer(deps.verifier);
  app.use(async (ctx, next) => (ctx.path.startsWith("/v1/") ? bearer(ctx, next) : next()));
  for (const router of v1) {
    app.use(router.routes());
    app.use(router.allowedMethods({ throw: true, methodNotAllowed: () => new PartnerError("method_not_allowed") }));
  }
  app.use((ctx) => {
    if (ctx.body === undefined && ctx.status === 404) throw new PartnerError("not_found");
  });
  return app;
}
