import { afterAll, beforeAll, beforeEach, describe, expect, it } from "@jest/globals";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { create } from "@bufbuild/protobuf";
import { authv1, commonv1, connectionv1 } from "@pi/proto";
import { ErrorReason, RpcError, serviceError, Status } from "@pi/common/rpc/errors";
import { inSpan } from "@pi/common/runtime/telemetry";
import type { AuthClient, ConnectionClient } from "@pi/common/rpc/clients";
import { batchedConnectionReads, batchedTokenIssuer, type ConnectionRead, type TokenRequest } from "../src/batches.js";

// The gateway's token requests to auth and connection polls, batched per event-loop turn (batches.ts).

const exporter = new InMemorySpanExporter();
beforeAll(() => {
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
afterAll(() => {
  trace.disable();
  context.disable();
});
beforeEach(() => exporter.reset());

/** A stand-in auth: records every IssueTokens call; each answers when the test says so. */
function fakeAuth() {
  const calls: { requests: TokenRequest[]; answer(): void; fail(err: Error): void }[] = [];
  const auth = {
    issueTokens: (req: { requests: TokenRequest[] }) =>
      new Promise<authv1.IssueTokensResponse>((resolve, reject) => {
        const responses = req.requests.map((r) =>
          create(authv1.IssueTokenResponseSchema, {
            outcome: {
              case: "token",
              value: { accessToken: `token for ${r.clientId}`, expiresIn: 900n, scope: r.scope ?? "" },
            },
          }),
        );
        calls.push({
          requests: req.requests,
          answer: () => resolve(create(authv1.IssueTokensResponseSchema, { responses })),
          fail: reject,
        });
      }),
  };
  return { auth: auth as unknown as AuthClient, calls };
}

const request = (n: number): TokenRequest => ({ clientId: `cli_${n}`, clientSecret: `sk_${n}` });
const accessTokenOf = (res: authv1.IssueTokenResponse) =>
  res.outcome.case === "token" ? res.outcome.value.accessToken : undefined;
const nextTurn = () => new Promise((r) => setImmediate(r));

describe("token requests in batches", () => {
  it("the requests of one turn share one call, and each gets its own answer", async () => {
    const { auth, calls } = fakeAuth();
    const issue = batchedTokenIssuer(auth);
    const answers = [1, 2, 3].map((n) => issue(request(n)));
    await nextTurn();
    expect(calls.map((c) => c.requests.map((r) => r.clientId))).toEqual([["cli_1", "cli_2", "cli_3"]]);
    calls[0]!.answer();
    expect((await Promise.all(answers)).map(accessTokenOf)).toEqual([
      "token for cli_1",
      "token for cli_2",
      "token for cli_3",
    ]);
  });

  it("a request alone is sent in the turn it arrived in, waiting for no other", async () => {
    const { auth, calls } = fakeAuth();
    const issue = batchedTokenIssuer(auth);
    const answer = issue(request(1));
    await nextTurn();
    expect(calls).toHaveLength(1);
    calls[0]!.answer();
    expect(accessTokenOf(await answer)).toBe("token for cli_1");
  });

  it("a request made while a call is in flight goes out in a call of its own, without waiting for the first", async () => {
    const { auth, calls } = fakeAuth();
    const issue = batchedTokenIssuer(auth);
    const first = issue(request(1));
    await nextTurn();
    const second = issue(request(2));
    await nextTurn();
    expect(calls.map((c) => c.requests.length)).toEqual([1, 1]);
    calls[1]!.answer();
    expect(accessTokenOf(await second)).toBe("token for cli_2");
    calls[0]!.answer();
    expect(accessTokenOf(await first)).toBe("token for cli_1");
  });

  it("no call carries more than the batch size", async () => {
    const { auth, calls } = fakeAuth();
    const issue = batchedTokenIssuer(auth, 2);
    const answers = [1, 2, 3, 4, 5].map((n) => issue(request(n)));
    await nextTurn();
    expect(calls.map((c) => c.requests.map((r) => r.clientId))).toEqual([
      ["cli_1", "cli_2"],
      ["cli_3", "cli_4"],
      ["cli_5"],
    ]);
    for (const c of calls) c.answer();
    expect((await Promise.all(answers)).map(accessTokenOf)).toEqual([1, 2, 3, 4, 5].map((n) => `token for cli_${n}`));
  });

  it("a failed call fails each of its requests with the call's error, and only those", async () => {
    const { auth, calls } = fakeAuth();
    const issue = batchedTokenIssuer(auth);
    const failing = [1, 2].map((n) => issue(request(n)));
    await nextTurn();
    const later = issue(request(3));
    await nextTurn();
    const outage = new Error("auth unavailable");
    calls[0]!.fail(outage);
    for (const answer of failing) await expect(answer).rejects.toBe(outage);
    calls[1]!.answer();
    expect(accessTokenOf(await later)).toBe("token for cli_3");
  });

  it("an answer with another number of outcomes than requests fails every request of the call", async () => {
    const short = {
      issueTokens: async () => create(authv1.IssueTokensResponseSchema, { responses: [] }),
    } as unknown as AuthClient;
    const issue = batchedTokenIssuer(short);
    await expect(issue(request(1))).rejects.toThrow(/same length/);
  });

  it("a batch of one is part of its request's trace; a larger batch is linked from each request's trace", async () => {
    const { auth, calls } = fakeAuth();
    const issue = batchedTokenIssuer(auth);
    const traced = (n: number) =>
      inSpan(`request ${n}`, {}, async (span) => ({ answer: issue(request(n)), traceId: span.spanContext().traceId }));

    const alone = await traced(1);
    await nextTurn();
    calls[0]!.answer();
    await alone.answer;
    const one = exporter.getFinishedSpans().find((s) => s.name === "issue tokens")!;
    expect(one.spanContext().traceId).toBe(alone.traceId);
    expect(one.links).toEqual([]);

    exporter.reset();
    const together = await Promise.all([traced(2), traced(3)]);
    await nextTurn();
    calls[1]!.answer();
    await Promise.all(together.map((t) => t.answer));
    const batch = exporter.getFinishedSpans().find((s) => s.name === "issue tokens")!;
    expect(together.map((t) => t.traceId)).not.toContain(batch.spanContext().traceId);
    expect(batch.links.map((l) => l.context.traceId)).toEqual(together.map((t) => t.traceId));
    expect(batch.attributes["token.requests"]).toBe(2);
  });
});

describe("connection polls in batches", () => {
  const read = (id: string): ConnectionRead => ({ partnerId: "ptr_a", id, mode: commonv1.Mode.LIVE });
  const found = (id: string) => ({ connection: { id, status: connectionv1.ExternalStatus.APPROVED } });
  const idOf = (res: connectionv1.GetConnectionResponse) => res.connection?.id ?? null;

  it("the polls of one turn share one GetConnections call; an answer without a connection stays one", async () => {
    const calls: ConnectionRead[][] = [];
    const connections = {
      getConnections: async (req: { requests: ConnectionRead[] }) => {
        calls.push(req.requests);
        return create(connectionv1.GetConnectionsResponseSchema, {
          responses: req.requests.map((r) => (r.id === "con_known" ? found(r.id) : {})),
        });
      },
    } as unknown as ConnectionClient;
    const poll = batchedConnectionReads(connections);
    const answers = await Promise.all(["con_known", "con_unknown"].map((id) => poll(read(id))));
    expect(calls.map((c) => c.map((r) => r.id))).toEqual([["con_known", "con_unknown"]]);
    expect(answers.map(idOf)).toEqual(["con_known", null]);
  });

  it("a replica without GetConnections (1.0.0) is asked with one GetConnection each; its not_found is an answer without a connection, any other failure fails", async () => {
    const connections = {
      getConnections: async () => {
        throw new RpcError("GetConnections is not implemented", Status.UNIMPLEMENTED);
      },
      getConnection: async (r: ConnectionRead) => {
        if (r.id === "con_known") return create(connectionv1.GetConnectionResponseSchema, found(r.id));
        if (r.id === "con_unknown") throw serviceError(ErrorReason.NOT_FOUND, "no such connection");
        throw new RpcError("connection unavailable", Status.UNAVAILABLE);
      },
    } as unknown as ConnectionClient;
    const poll = batchedConnectionReads(connections);
    const answers = await Promise.all(["con_known", "con_unknown"].map((id) => poll(read(id))));
    expect(answers.map(idOf)).toEqual(["con_known", null]);
    await expect(poll(read("con_away"))).rejects.toMatchObject({ code: Status.UNAVAILABLE });
  });
});

describe("POST /oauth/token answered from a batch", () => {
  it("a request auth could not decide (its credential unreadable) is the envelope 503 with Retry-After; a request decided beside it gets its token", async () => {
    const { startEdge } = await import("./edge-harness.js");
    const token = (clientId: string) =>
      create(authv1.IssueTokenResponseSchema, {
        outcome: { case: "token", value: { accessToken: `at_${clientId}`, expiresIn: 900n, scope: "files:write" } },
      });
    const unavailable = create(authv1.IssueTokenResponseSchema, {
      outcome: { case: "failure", value: authv1.TokenFailure.UNAVAILABLE },
    });
    const edge = await startEdge({
      settings: { RATE_LIMIT_TOKEN_PER_MINUTE: "1000" },
      auth: {
        issueTokens: (req) => ({
          responses: req.requests.map((r) => (r.clientId === "cli_away" ? unavailable : token(r.clientId))),
        }),
      },
    });
    try {
      const send = (clientId: string) =>
        edge.send("POST", "/oauth/token", {
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: `grant_type=client_credentials&client_id=${clientId}&client_secret=sk_x`,
        });
      const [ok, away] = await Promise.all([send("cli_ok"), send("cli_away")]);
      expect([ok.status, ok.json.access_token]).toEqual([200, "at_cli_ok"]);
      expect([away.status, away.headers["retry-after"], away.json.error.code]).toEqual([
        503,
        "1",
        "service_unavailable",
      ]);
    } finally {
      await edge.stop();
    }
  });
});
