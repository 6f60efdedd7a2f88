import { afterAll, beforeAll, describe, expect, it, jest } from "@jest/globals";
import { connectionv1 } from "@pi/proto";
import { PARTNER_ERRORS } from "../src/errors.js";
import { PartnerError } from "../src/errors.js";
import { partnerRateLimit, retryAfterSeconds } from "../src/rate-limit.js";
import { startEdge, type Answer, type Edge } from "./edge-harness.js";
import type { GatewayContext } from "../src/router.js";

// Rate limits (spec "Limits"): per authenticated partner on /v1/*, per client IP on POST
// /oauth/token, per gateway instance; a 429 carries Retry-After (integer seconds) and the envelope.
// The budgets are the smallest the settings allow (50 per second, 60 per minute); bursts are sent
// concurrently and several times the budget, so a slow machine cannot spread them past the window.

const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
const connections = {
  getConnection: () => ({ connection: { id: CON, status: connectionv1.ExternalStatus.APPROVED } }),
};

function expect429(res: Answer, maxRetryAfter: number) {
  expect(res.status).toBe(429);
  expect(res.json).toEqual({
    error: { type: "rate_limit_error", code: "rate_limited", message: PARTNER_ERRORS.rate_limited.message },
  });
  expect(res.headers["retry-after"]).toMatch(/^[0-9]+$/);
  const seconds = Number(res.headers["retry-after"]);
  expect(seconds).toBeGreaterThanOrEqual(1);
  expect(seconds).toBeLessThanOrEqual(maxRetryAfter);
}

const count = (answers: Answer[]) => {
  const counts: Record<number, number> = {};
  for (const a of answers) counts[a.status] = (counts[a.status] ?? 0) + 1;
  return counts;
};

describe("Retry-After", () => {
  it("is whole seconds, rounded up, and at least 1", () => {
    expect(retryAfterSeconds(0)).toBe(1);
    expect(retryAfterSeconds(-5)).toBe(1);
    expect(retryAfterSeconds(1)).toBe(1);
    expect(retryAfterSeconds(999)).toBe(1);
    expect(retryAfterSeconds(1000)).toBe(1);
    expect(retryAfterSeconds(1001)).toBe(2);
    expect(retryAfterSeconds(59_999)).toBe(60);
  });
});

describe("per-partner limit on /v1", () => {
  it("keys on the partner: its live and test tokens share one budget, and another partner has its own", async () => {
    const limit = partnerRateLimit(50);
    const ctxOf = (partnerId: string, mode: "live" | "test") =>
      ({
        state: { principal: { partnerId, clientId: `cli_${mode}`, mode, scopes: new Set() } },
      }) as unknown as GatewayContext;
    const pass = async (ctx: GatewayContext) => {
      try {
        await limit(ctx, async () => {});
        return "ok";
      } catch (err) {
        return err instanceof PartnerError ? err.code : String(err);
      }
    };
    // Microseconds apart: well within one window.
    const live = await Promise.all(Array.from({ length: 25 }, () => pass(ctxOf("ptr_shared", "live"))));
    const test = await Promise.all(Array.from({ length: 25 }, () => pass(ctxOf("ptr_shared", "test"))));
    expect([...live, ...test].every((r) => r === "ok")).toBe(true);
    expect(await pass(ctxOf("ptr_shared", "test"))).toBe("rate_limited");
    expect(await pass(ctxOf("ptr_shared", "live"))).toBe("rate_limited");
    expect(await pass(ctxOf("ptr_other", "live"))).toBe("ok");
  });

  let edge: Edge;
  beforeAll(async () => {
    edge = await startEdge({ settings: { RATE_LIMIT_V1_PER_SECOND: "50" }, connections });
  });
  afterAll(() => edge.stop());

  const burst = (token: string, n: number) =>
    Promise.all(
      Array.from({ length: n }, () =>
        edge.send("GET", `/v1/connections/${CON}`, { headers: { authorization: `Bearer ${token}` } }),
      ),
    );

  it("a partner over its budget gets 429 rate_limited with Retry-After, and another partner is unaffected", async () => {
    const [a, b] = await Promise.all([edge.token("ptr_busy"), edge.token("ptr_quiet")]);
    // The limiter's clock (Date and its expiry timers) stands still: the whole burst falls in one
    // window however slow the machine, so a burst of a little over the budget is enough.
    jest.useFakeTimers({ doNotFake: ["nextTick", "setImmediate", "queueMicrotask", "hrtime", "performance"] });
    try {
      const answers = await burst(a, 60);
      const statuses = count(answers);
      expect(Object.keys(statuses).sort()).toEqual(["200", "429"]);
      expect(statuses[200]).toBeGreaterThanOrEqual(50);
      expect(statuses[429]).toBeGreaterThanOrEqual(1);
      expect429(answers.find((r) => r.status === 429)!, 1);
      // While the busy partner is still limited, the quiet one gets every request through.
      const quiet = await burst(b, 40);
      expect(count(quiet)).toEqual({ 200: 40 });
    } finally {
      jest.useRealTimers();
    }
  });

  it("requests with a bad bearer are 401 and cost no partner any budget", async () => {
    const answers = await Promise.all(
      Array.from({ length: 150 }, () =>
        edge.send("GET", `/v1/connections/${CON}`, { headers: { authorization: "Bearer not.a.token" } }),
      ),
    );
    expect(count(answers)).toEqual({ 401: 150 });
    expect((await burst(await edge.token("ptr_after_401s"), 1))[0]!.status).toBe(200);
  });

  it("does not touch paths outside /v1", async () => {
    const answers = await Promise.all(Array.from({ length: 120 }, () => edge.send("GET", "/healthz")));
    expect(count(answers)).toEqual({ 200: 120 });
  });
});

describe("per-client-IP limit on POST /oauth/token", () => {
  // Malformed requests: the limit is taken before the body is read, so they count like any other.
  const attempt = (edge: Edge, opts: { localAddress?: string; forwardedFor?: string } = {}) =>
    edge.send("POST", "/oauth/token", {
      headers: {
        "content-type": "application/x-www-form-urlencoded",
        ...(opts.forwardedFor ? { "x-forwarded-for": opts.forwardedFor } : {}),
      },
      body: "grant_type=client_credentials",
      localAddress: opts.localAddress,
    });
  const attempts = (edge: Edge, n: number, opts: Parameters<typeof attempt>[1] = {}) =>
    Promise.all(Array.from({ length: n }, () => attempt(edge, opts)));

  describe("from the socket's address (TRUSTED_PROXY_HOPS=0, the default)", () => {
    let edge: Edge;
    beforeAll(async () => {
      edge = await startEdge({ settings: { RATE_LIMIT_TOKEN_PER_MINUTE: "60" } });
    });
    afterAll(() => edge.stop());

    it("an IP over its budget gets the envelope's 429 with Retry-After; another IP is unaffected", async () => {
      const first = await attempts(edge, 60, { localAddress: "127.0.0.1" });
      expect(count(first)).toEqual({ 400: 60 });
      expect(first[0]!.json).toEqual({ error: "invalid_request", error_description: expect.any(String) });
      const over = await attempt(edge, { localAddress: "127.0.0.1" });
      expect429(over, 60);
      expect(count(await attempts(edge, 10, { localAddress: "127.0.0.2" }))).toEqual({ 400: 10 });
    });

    it("ignores X-Forwarded-For, so a client cannot buy itself a new budget", async () => {
      const spoofed = await attempts(edge, 5, { localAddress: "127.0.0.1", forwardedFor: "198.51.100.7" });
      expect(count(spoofed)).toEqual({ 429: 5 });
    });

    it("leaves /v1 alone: the limits are separate", async () => {
      const res = await edge.send("GET", `/v1/connections/${CON}`, {
        headers: { authorization: `Bearer ${await edge.token("ptr_token_ip")}` },
        localAddress: "127.0.0.1",
      });
      expect(res.status).not.toBe(429);
    });
  });

  describe("behind a trusted proxy (TRUSTED_PROXY_HOPS=1)", () => {
    let edge: Edge;
    beforeAll(async () => {
      edge = await startEdge({ settings: { RATE_LIMIT_TOKEN_PER_MINUTE: "60", TRUSTED_PROXY_HOPS: "1" } });
    });
    afterAll(() => edge.stop());

    it("limits the address the proxy appended to X-Forwarded-For; entries a client forged before it do not count", async () => {
      const viaProxy = await attempts(edge, 61, { forwardedFor: "203.0.113.9" });
      expect(count(viaProxy)).toEqual({ 400: 60, 429: 1 });
      // The same client, prefixing a forged address of its own: still its budget.
      expect(count(await attempts(edge, 3, { forwardedFor: "10.9.9.9, 203.0.113.9" }))).toEqual({ 429: 3 });
      // Another client behind the same proxy (same socket address): a budget of its own.
      expect(count(await attempts(edge, 10, { forwardedFor: "10.9.9.9, 203.0.113.10" }))).toEqual({ 400: 10 });
    });
  });
});
