import DataLoader from "dataloader";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { authv1 } from "@pi/proto";
import { activeContext, inSpan, ROOT_CONTEXT, type Context } from "@pi/common/telemetry";
import { MAX_TOKENS_PER_CALL, type AuthClient } from "@pi/common/clients";

// Token requests go to auth in batches (docs/performance.md, "Token requests in batches"). One
// internal call costs the gateway and auth several times what issuing a token does, so the token
// requests that reach this gateway within one turn of its event loop share one IssueTokens call.
// Nothing waits for company: a request is sent at the end of the turn it arrived in, alone when it
// came alone, so a batch only forms when requests were already queued together (under load).
// Each request keeps its own outcome (auth answers every request as IssueToken would); a failed
// call fails every request in it, as it would have failed each of them alone.

export type TokenRequest = MessageInitShape<typeof authv1.IssueTokenRequestSchema>;
export type IssueToken = (request: TokenRequest) => Promise<authv1.IssueTokenResponse>;

interface Queued {
  request: TokenRequest;
  /** The trace of the partner request this token is for. */
  trace: Context;
}

/** Issues tokens through `auth`, batching the requests of each event-loop turn (at most `maxBatch` per call). */
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
