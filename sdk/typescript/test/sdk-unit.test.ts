import { describe, expect, it, jest } from "@jest/globals";
import { createHmac } from "node:crypto";
import { decodeJwt, generateKeyPair, jwtVerify } from "jose";
import {
  basicCredentials,
  CLIENT_ASSERTION_TYPE,
  OAuthTokenError,
  PartnerApiError,
  PartnerClient,
  TokenSource,
  verifyWebhook,
  WebhookVerificationError,
} from "../src/index.js";

// The SDK's own rules, with a fake fetch: token caching and renewal, retries on one Idempotency-Key,
// typed errors, webhook verification with several secrets. Its run against the stack is sdk-stack.test.ts.

const sign = (secret: string, t: number, body: string) =>
  createHmac("sha256", secret).update(`${t}.${body}`).digest("hex");
const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
const tokenBody = (n: number, expiresIn = 900) => ({
  access_token: `tok${n}`,
  token_type: "Bearer",
  expires_in: expiresIn,
  scope: "connections:write files:write",
});

/** Runs `work` on jest's fake clock, moved on until the work settles: the SDK's waits (backoff, Retry-After) take no real time. */
async function onFakeClock<T>(work: () => Promise<T>): Promise<T> {
  jest.useFakeTimers({ doNotFake: ["nextTick", "setImmediate", "queueMicrotask"] });
  try {
    let settled = false;
    const result = work();
    result.then(
      () => (settled = true),
      () => (settled = true),
    );
    while (!settled) await jest.advanceTimersByTimeAsync(10);
    return await result;
  } finally {
    jest.useRealTimers();
  }
}

describe("verifyWebhook", () => {
  const body =
    '{"id":"evt_1","type":"connection.approved","created":1,"data":{"connection_id":"con_1","status":"approved"}}';
  const now = 1_700_000_000_000;
  const t = now / 1000;

  it("accepts a header with several v1 values when any secret matches any of them (a rotation's overlap)", async () => {
    const header = `t=${t},v1=${sign("new", t, body)},v1=${sign("old", t, body)}`;
    await expect(verifyWebhook(body, header, "old", { now })).resolves.toMatchObject({ id: "evt_1" });
    await expect(verifyWebhook(body, header, "new", { now })).resolves.toMatchObject({ id: "evt_1" });
    await expect(
      verifyWebhook(Buffer.from(body), `t=${t},v1=${sign("new", t, body)}`, ["old", "new"], { now }),
    ).resolves.toMatchObject({ type: "connection.approved" });
  });

  it.each([
    ["a wrong secret", (h: string) => h, "other"],
    ["a tampered body", (h: string) => h, "s", body.replace("approved", "revoked")],
    ["a malformed header", () => "v1=abc", "s"],
    ["no header", () => undefined, "s"],
  ])("refuses %s", async (_why, mangle, secret, sent = body) => {
    const header = mangle(`t=${t},v1=${sign("s", t, body)}`);
    await expect(verifyWebhook(sent, header as string | undefined, secret, { now })).rejects.toBeInstanceOf(
      WebhookVerificationError,
    );
  });

  it("refuses a t outside the tolerance, which the caller sets", async () => {
    const old = t - 301;
    const header = `t=${old},v1=${sign("s", old, body)}`;
    await expect(verifyWebhook(body, header, "s", { now })).rejects.toThrow(/tolerance/);
    await expect(verifyWebhook(body, header, "s", { now, toleranceSeconds: 600 })).resolves.toMatchObject({
      id: "evt_1",
    });
  });
});

describe("TokenSource", () => {
  it("private_key_jwt: a fresh assertion per request (iss = sub = client id, aud the token endpoint, kid, a new jti, exp two minutes ahead), no secret, no Basic", async () => {
    const { publicKey, privateKey } = await generateKeyPair("RS384");
    const seen: Request[] = [];
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      seen.push(new Request(input, init));
      return json(200, tokenBody(seen.length, 2));
    };
    let clock = 1_800_000_000_000;
    const source = new TokenSource({
      baseUrl: "https://api.example",
      clientId: "cli_k",
      authMethod: "private_key_jwt",
      privateKey,
      kid: "k1",
      alg: "RS384",
      fetch,
      now: () => clock,
    });
    await source.get();
    clock += 5_000;
    await source.get();
    const forms = await Promise.all(seen.map(async (r) => new URLSearchParams(await r.text())));
    expect(seen.map((r) => r.headers.get("authorization"))).toEqual([null, null]);
    expect([...forms[0]!.keys()].sort()).toEqual(["client_assertion", "client_assertion_type", "grant_type"]);
    expect(forms[0]!.get("client_assertion_type")).toBe(CLIENT_ASSERTION_TYPE);
    const checked = await jwtVerify(forms[0]!.get("client_assertion")!, publicKey, {
      currentDate: new Date(1_800_000_000_000),
      audience: "https://api.example/oauth/token",
      issuer: "cli_k",
      subject: "cli_k",
    });
    expect(checked.protectedHeader).toMatchObject({ alg: "RS384", kid: "k1" });
    expect(checked.payload.exp! - checked.payload.iat!).toBe(120);
    expect(forms[1]!.get("client_assertion")).not.toBe(forms[0]!.get("client_assertion"));
    expect(decodeJwt(forms[1]!.get("client_assertion")!).jti).not.toBe(checked.payload.jti);
  });

  it("private_key_jwt needs the key, its kid and alg; the other methods a secret", () => {
    expect(
      () =>
        new TokenSource({ baseUrl: "http://x", clientId: "c", authMethod: "private_key_jwt", kid: "k", alg: "ES256" }),
    ).toThrow(/privateKey/);
    expect(() => new TokenSource({ baseUrl: "http://x", clientId: "c" })).toThrow(/clientSecret/);
  });

  it("Basic by default (form-urlencoded, then base64), the body fields on request", async () => {
    expect(basicCredentials("cli:1", "s+/ x")).toBe(`Basic ${Buffer.from("cli%3A1:s%2B%2F+x").toString("base64")}`);
    const seen: Request[] = [];
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      seen.push(new Request(input, init));
      return json(200, tokenBody(seen.length));
    };
    await new TokenSource({ baseUrl: "http://x", clientId: "cli_a", clientSecret: "sk", fetch }).get();
    await new TokenSource({
      baseUrl: "http://x",
      clientId: "cli_a",
      clientSecret: "sk",
      fetch,
      authMethod: "body",
    }).get();
    expect(seen[0]!.headers.get("authorization")).toBe(basicCredentials("cli_a", "sk"));
    expect(await seen[0]!.text()).toBe("grant_type=client_credentials");
    expect(seen[1]!.headers.get("authorization")).toBeNull();
    expect(await seen[1]!.text()).toBe("grant_type=client_credentials&client_id=cli_a&client_secret=sk");
  });

  it("keeps the token until shortly before it expires, then fetches a new one; concurrent callers share one request", async () => {
    let clock = 0;
    let calls = 0;
    const fetch = async () => json(200, tokenBody(++calls, 900));
    const source = new TokenSource({
      baseUrl: "http://x",
      clientId: "a",
      clientSecret: "b",
      fetch,
      now: () => clock,
      renewBeforeSeconds: 60,
    });
    expect(await Promise.all([source.get(), source.get(), source.get()])).toEqual(["tok1", "tok1", "tok1"]);
    clock = 839_000;
    expect(await source.get()).toBe("tok1");
    clock = 840_000;
    expect(await source.get()).toBe("tok2");
    expect(calls).toBe(2);
  });

  it("a refused request is an OAuthTokenError with the OAuth code", async () => {
    const fetch = async () =>
      json(400, { error: "invalid_client", error_description: "Client authentication failed." });
    const err = await new TokenSource({ baseUrl: "http://x", clientId: "a", clientSecret: "b", fetch })
      .get()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OAuthTokenError);
    expect(err).toMatchObject({ status: 400, code: "invalid_client" });
  });
});

describe("PartnerClient retries", () => {
  function fakeApi(answers: (() => Response)[]) {
    const files: Request[] = [];
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      const req = new Request(input, init);
      if (req.url.endsWith("/oauth/token")) return json(200, tokenBody(1));
      files.push(req);
      const next = answers.shift();
      if (!next) throw new Error("no more answers");
      return next();
    };
    return { fetch, files };
  }
  const input = {
    file: new Uint8Array([37, 80, 68, 70]),
    filename: "a.pdf",
    contentType: "application/pdf",
    elder: "a.b.c@elders.example",
  };

  it("a network error, a 503 and a 429 are retried with the same Idempotency-Key; the 429's Retry-After is waited for", async () => {
    const api = fakeApi([
      () => {
        throw new TypeError("fetch failed");
      },
      () =>
        json(503, { error: { type: "api_error", code: "service_unavailable", message: "x" } }, { "retry-after": "1" }),
      () =>
        json(429, { error: { type: "rate_limit_error", code: "rate_limited", message: "x" } }, { "retry-after": "1" }),
      () => json(202, { id: "file_1", status: "received" }),
    ]);
    const client = new PartnerClient({
      baseUrl: "http://x",
      clientId: "a",
      clientSecret: "b",
      fetch: api.fetch,
      retry: { baseDelayMs: 10 },
    });
    const { sent, waitedMs } = await onFakeClock(async () => {
      const started = Date.now();
      const sent = await client.sendFile(input);
      return { sent, waitedMs: Date.now() - started };
    });
    expect(sent).toEqual({ id: "file_1", status: "received" });
    expect(waitedMs).toBeGreaterThanOrEqual(2000); // two Retry-After: 1
    const keys = api.files.map((r) => r.headers.get("idempotency-key"));
    expect(keys).toHaveLength(4); // every attempt, the one that got no answer included
    expect(new Set(keys).size).toBe(1);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("each distinct file gets a fresh key", async () => {
    const api = fakeApi([
      () => json(202, { id: "file_1", status: "received" }),
      () => json(202, { id: "file_2", status: "received" }),
    ]);
    const client = new PartnerClient({ baseUrl: "http://x", clientId: "a", clientSecret: "b", fetch: api.fetch });
    await client.sendFile(input);
    await client.sendFile(input);
    expect(api.files[0]!.headers.get("idempotency-key")).not.toBe(api.files[1]!.headers.get("idempotency-key"));
  });

  it("other errors are final and typed by code", async () => {
    const api = fakeApi([
      () => json(403, { error: { type: "permission_error", code: "no_active_connection", message: "No." } }),
    ]);
    const client = new PartnerClient({ baseUrl: "http://x", clientId: "a", clientSecret: "b", fetch: api.fetch });
    const err = await client.sendFile(input).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PartnerApiError);
    expect(err).toMatchObject({ status: 403, code: "no_active_connection", type: "permission_error" });
    expect(api.files).toHaveLength(1);
  });
});

describe("PartnerClient.testHelpers", () => {
  function recordingApi(answer: (req: Request) => Response) {
    const sent: Request[] = [];
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      const req = new Request(input, init);
      if (req.url.endsWith("/oauth/token")) return json(200, tokenBody(1));
      sent.push(req);
      return answer(req);
    };
    return { fetch, sent };
  }

  it("each helper POSTs to its path with the bearer and returns the connection in its new state", async () => {
    const api = recordingApi((req) =>
      json(200, {
        id: "con_1",
        status: req.url.endsWith("/sever")
          ? "revoked"
          : req.url.endsWith("/expire")
            ? "expired"
            : req.url.endsWith("/approve")
              ? "approved"
              : "pending",
      }),
    );
    const client = new PartnerClient({ baseUrl: "http://x/", clientId: "a", clientSecret: "b", fetch: api.fetch });
    expect(await client.testHelpers.approveConnection("con_1")).toEqual({ id: "con_1", status: "approved" });
    expect(await client.testHelpers.declineConnection("con_1")).toEqual({ id: "con_1", status: "pending" });
    expect(await client.testHelpers.severConnection("con_1")).toEqual({ id: "con_1", status: "revoked" });
    expect(await client.testHelpers.expireConnection("con_1")).toEqual({ id: "con_1", status: "expired" });
    expect(api.sent.map((r) => `${r.method} ${r.url} ${r.headers.get("authorization")}`)).toEqual(
      ["approve", "decline", "sever", "expire"].map(
        (act) => `POST http://x/v1/test_helpers/connections/con_1/${act} Bearer tok1`,
      ),
    );
  });

  it("a refused transition is a final invalid_request; a live credential's 404 a final not_found", async () => {
    const answers = [
      json(400, {
        error: {
          type: "invalid_request_error",
          code: "invalid_request",
          message: "The connection is pending; only an approved connection can be severed.",
        },
      }),
      json(404, { error: { type: "invalid_request_error", code: "not_found", message: "No such resource." } }),
    ];
    const api = recordingApi(() => answers.shift()!);
    const client = new PartnerClient({ baseUrl: "http://x", clientId: "a", clientSecret: "b", fetch: api.fetch });
    await expect(client.testHelpers.severConnection("con_1")).rejects.toMatchObject({
      status: 400,
      code: "invalid_request",
      message: expect.stringMatching(/only an approved connection/),
    });
    await expect(client.testHelpers.approveConnection("con_2")).rejects.toMatchObject({
      status: 404,
      code: "not_found",
    });
    expect(api.sent).toHaveLength(2);
  });
});

describe("PartnerClient.events", () => {
  const evt = (n: number) => ({
    id: `evt_${n}`,
    type: "connection.approved" as const,
    created: 1767225600 + n,
    data: { connection_id: `con_${n}`, status: "approved" as const },
  });

  function pagedApi(all: ReturnType<typeof evt>[], failFirst?: number) {
    const queries: URLSearchParams[] = [];
    const fetch = async (input: RequestInfo | URL, init?: RequestInit) => {
      const req = new Request(input, init);
      if (req.url.endsWith("/oauth/token")) return json(200, tokenBody(1));
      const url = new URL(req.url);
      queries.push(url.searchParams);
      if (failFirst !== undefined && queries.length === failFirst)
        return json(
          503,
          { error: { type: "api_error", code: "service_unavailable", message: "x" } },
          { "retry-after": "1" },
        );
      const limit = Number(url.searchParams.get("limit") ?? "10");
      const after = url.searchParams.get("starting_after");
      const from = after ? all.findIndex((e) => e.id === after) + 1 : 0;
      const data = all.slice(from, from + limit);
      return json(200, { data, has_more: from + limit < all.length });
    };
    return { fetch, queries };
  }

  it("iterates over every page with starting_after, newest first, each event once", async () => {
    const all = Array.from({ length: 7 }, (_, i) => evt(7 - i));
    const api = pagedApi(all);
    const client = new PartnerClient({ baseUrl: "http://x", clientId: "a", clientSecret: "b", fetch: api.fetch });
    const seen = [];
    for await (const event of client.events({ pageSize: 3, type: "connection.approved" })) seen.push(event);
    expect(seen).toEqual(all);
    expect(api.queries.map((q) => [q.get("limit"), q.get("starting_after"), q.get("type")])).toEqual([
      ["3", null, "connection.approved"],
      ["3", "evt_5", "connection.approved"],
      ["3", "evt_2", "connection.approved"],
    ]);
  });

  it("fetches no further page once the loop stops, and retries a page answered 503", async () => {
    const all = Array.from({ length: 5 }, (_, i) => evt(5 - i));
    const api = pagedApi(all, 1);
    const client = new PartnerClient({
      baseUrl: "http://x",
      clientId: "a",
      clientSecret: "b",
      fetch: api.fetch,
      retry: { baseDelayMs: 10 },
    });
    const seen: string[] = [];
    await onFakeClock(async () => {
      for await (const event of client.events({ pageSize: 2 })) {
        if (event.id === "evt_4") break; // an event already held: caught up
        seen.push(event.id);
      }
    });
    expect(seen).toEqual(["evt_5"]);
    expect(api.queries).toHaveLength(2); // the 503, then the same page again
  });

  it("an empty list ends at once", async () => {
    const api = pagedApi([]);
    const client = new PartnerClient({ baseUrl: "http://x", clientId: "a", clientSecret: "b", fetch: api.fetch });
    const seen = [];
    for await (const event of client.events()) seen.push(event);
    expect(seen).toEqual([]);
    expect(api.queries.map((q) => q.get("limit"))).toEqual(["100"]);
  });
});
