import DataLoader from "dataloader";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { authv1 } from "@pi/proto";
import { activeContext, inSpan, ROOT_CONTEXT, type Context } from "@pi/common/runtime/telemetry";
import { MAX_TOKENS_PER_CALL, type AuthClient } from "@pi/common/rpc/clients";

// The token requests of one event-loop turn share one IssueTokens call (docs/performance.md, "Token
// requests in batches"): nothing waits for company, and each request keeps its own outcome.

export type TokenRequest = MessageInitShape<typeof authv1.IssueTokenRequestSchema>;
export type IssueToken = (request: TokenRequest) => Promise<authv1.IssueTokenResponse>;

interface Queued {
  request: TokenRequest;
  trace: Context;
}

export function batchedTokenIssuer(auth: AuthClient, maxBatch = MAX_TOKENS_PER_CALL): IssueToken {
  const loader = new DataLoader<Queued, authv1.IssueTokenResponse>(
    async (queued) => {
      // A batch of one is part of its request's trace, as a call of its own would be; a larger one
      // is a trace of its own, linked from every request it carries.
      const alone = queued.length === 1;
      const span = {
        parent: alone ? queued[0]!.trace : ROOT_CONTEXT,
        links: alone ? [] : queued.map((q) => q.trace),
        attributes: { "token.requests": queued.length },
      };
      const res = await inSpan("issue tokens", span, () =>
        auth.issueTokens({ requests: queued.map((q) => q.request) }),
      );
      return res.responses;
    },
    { cache: false, maxBatchSize: maxBatch, batchScheduleFn: (dispatch) => setImmediate(dispatch) },
  );
  return (request) => loader.load({ request, trace: activeContext() });
}
