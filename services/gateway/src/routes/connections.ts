import { bodyParser } from "@koa/bodyparser";
import type { Middleware } from "koa";
import { connectionv1 } from "@pi/proto";
import { checkElderAddress } from "@pi/common/rules/elder-address";
import type { ConnectionClient } from "@pi/common/rpc/clients";
import type { ReadConnection } from "../batches.js";
import { invalid, PartnerError } from "../errors.js";
import { requireScope } from "../middleware.js";
import { allowedMethods, gatewayRouter, modeOf, type GatewayContext, type GatewayState } from "../router.js";

// Scope decision (the spec leaves GET and DELETE open): all three connection routes require
// connections:write, so a token narrowed to files:write cannot read or revoke connections.
export const CONNECTION_SCOPE = "connections:write";

export function connectionResource(c: connectionv1.PartnerConnection | undefined) {
  if (!c) throw new PartnerError("internal_error");
  // The enum's own name, lower-cased; UNSPECIFIED (never sent) reads as pending.
  return { id: c.id, status: c.status ? connectionv1.ExternalStatus[c.status]!.toLowerCase() : "pending" };
}

const jsonBody = bodyParser({
  enableTypes: ["json"],
  jsonLimit: "16kb",
  onError: (err: Error & { status?: number }) => {
    const message = err.status === 413 ? "The body is larger than 16 KB." : "The body is not valid JSON.";
    throw new PartnerError("invalid_request", { message });
  },
});

export function parseConnectionCreate(body: unknown, domain: string): string {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalid("The body must be a JSON object.");
  }
  const extra = Object.keys(body).find((k) => k !== "elder");
  if (extra !== undefined) throw invalid(`Unknown field ${JSON.stringify(extra)}.`, extra);
  const elder = (body as { elder?: unknown }).elder;
  if (elder === undefined) throw invalid("elder is required.", "elder");
  const check = checkElderAddress(elder, domain);
  if (!check.ok) throw invalid(`elder ${check.reason}.`, "elder");
  return check.address;
}

/** The shape of a connection id; anything else gets the same 404 as an unknown id, without a lookup. */
export const CONNECTION_ID = /^con_[0-9A-Za-z]{1,64}$/;

// Unknown, malformed and foreign ids (another partner's, or the other mode's) all leave through
// the one not_found of the error table: same status, body and headers.
const owned = (ctx: GatewayContext) => {
  const id = ctx.params.id ?? "";
  if (!CONNECTION_ID.test(id)) throw new PartnerError("not_found");
  return { partnerId: ctx.state.principal!.partnerId, mode: modeOf(ctx), id };
};

export default function connectionRoutes(connections: ConnectionClient, read: ReadConnection, domain: string) {
  const router = gatewayRouter();

  router.post(
    "/v1/connections",
    requireScope(CONNECTION_SCOPE),
    async (ctx, next) => {
      if (!ctx.is("application/json"))
        throw new PartnerError("unsupported_media_type", { message: "The body must be application/json." });
      await next();
    },
    jsonBody,
    async (ctx) => {
      const address = parseConnectionCreate(ctx.request.body, domain);
      const res = await connections.requestConnection({
        partnerId: ctx.state.principal!.partnerId,
        mode: modeOf(ctx),
        elderAddress: address,
      });
      ctx.status = 202;
      ctx.body = connectionResource(res.connection);
    },
  );

  router.get("/v1/connections/:id", requireScope(CONNECTION_SCOPE), async (ctx) => {
    const { connection } = await read(owned(ctx));
    if (!connection) throw new PartnerError("not_found");
    ctx.body = connectionResource(connection);
  });

  router.delete("/v1/connections/:id", requireScope(CONNECTION_SCOPE), async (ctx) => {
    const res = await connections.revokeConnection(owned(ctx));
    ctx.body = connectionResource(res.connection);
  });

  return router;
}

const TEST_HELPER_ACTS = ["approve", "decline", "sever", "expire"] as const;

/** POST /v1/test_helpers/connections/{id}/{act} (docs/edge.md), for test tokens only (testModeOnly). */
export function testHelperRoutes(connections: ConnectionClient) {
  const router = gatewayRouter();
  for (const name of TEST_HELPER_ACTS) {
    const act = connectionv1.TestHelperAct[name.toUpperCase() as Uppercase<typeof name>];
    router.post(`/v1/test_helpers/connections/:id/${name}`, requireScope(CONNECTION_SCOPE), async (ctx) => {
      const res = await connections.actOnTestConnection({ ...owned(ctx), act });
      ctx.body = connectionResource(res.connection);
    });
  }
  return router;
}

/** A live token never reaches the test helpers, and gets the one 404 of a path no route has. */
export function testModeOnly(router: ReturnType<typeof testHelperRoutes>): Middleware<GatewayState> {
  const routes = router.routes() as unknown as Middleware<GatewayState>;
  const methods = allowedMethods(router);
  return (ctx, next) => (ctx.state.principal?.mode === "test" ? routes(ctx, () => methods(ctx, next)) : next());
}
