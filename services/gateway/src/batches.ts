import DataLoader from "dataloader";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { connectionv1, type authv1 } from "@pi/proto";
import { ErrorReason, reasonOf, RpcError, Status } from "@pi/common/rpc/errors";
import { activeContext, inSpan, ROOT_CONTEXT, type Context } from "@pi/common/runtime/telemetry";
import { MAX_REQUESTS_PER_BATCH, type AuthClient, type ConnectionClient } from "@pi/common/rpc/clients";

// The requests of one event-loop turn share one call to a service (docs/performance.md, "Requests in
// batches"): nothing waits for company, and each request keeps its own outcome.

export type TokenRequest = MessageInitShape<typeof authv1.IssueTokenRequestSchema>;
export type IssueToken = (request: TokenRequest) => Promise<authv1.IssueTokenResponse>;
export type ConnectionRead = MessageInitShape<typeof connectionv1.GetConnectionRequestSchema>;
export type ReadConnection = (request: ConnectionRead) => Promise<connectionv1.GetConnectionResponse>;

interface Queued<R> {
  request: R;
  trace: Context;
}

/** `call` answers the requests of one batch, one answer each, in order; its span is `name`, counting `noun.requests`. */
function perTurn<R, A>(name: string, noun: string, maxBatch: number, call: (requests: R[]) => Promise<A[]>) {
  const loader = new DataLoader<Queued<R>, A>(
    (queued) => {
      // A batch of one is part of its request's trace, as a call of its own would be; a larger one
      // is a trace of its own, linked from every request it carries.
      const alone = queued.length === 1;
      const span = {
        parent: alone ? queued[0]!.trace : ROOT_CONTEXT,
        links: alone ? [] : queued.map((q) => q.trace),
        attributes: { [`${noun}.requests`]: queued.length },
      };
      return inSpan(name, span, () => call(queued.map((q) => q.request)));
    },
    { cache: false, maxBatchSize: maxBatch, batchScheduleFn: (dispatch) => setImmediate(dispatch) },
  );
  return (request: R) => loader.load({ request, trace: activeContext() });
}

export const batchedTokenIssuer = (auth: AuthClient, maxBatch = MAX_REQUESTS_PER_BATCH): IssueToken =>
  perTurn("issue tokens", "token", maxBatch, async (requests) => (await auth.issueTokens({ requests })).responses);

/** Polls of GET /v1/connections/{id}, in GetConnections calls; an answer without a connection is not found. */
export const batchedConnectionReads = (
  connections: ConnectionClient,
  maxBatch = MAX_REQUESTS_PER_BATCH,
): ReadConnection =>
  perTurn("get connections", "connection", maxBatch, (requests) =>
    connections.getConnections({ requests }).then(
      (res) => res.responses,
      // A 1.0.0 replica has no GetConnections: one GetConnection each (remove once no 1.0.0 replica runs).
      (err: unknown) => {
        if (!(err instanceof RpcError && err.code === Status.UNIMPLEMENTED)) throw err;
        return Promise.all(requests.map((r) => connections.getConnection(r).catch(notFoundAsNone)));
      },
    ),
  );

function notFoundAsNone(err: unknown): connectionv1.GetConnectionResponse {
  if (reasonOf(err)?.reason !== ErrorReason.NOT_FOUND) throw err;
  return create(connectionv1.GetConnectionResponseSchema);
}
