import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { NO_RATE_LIMITS } from "../support/auth.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { validateResponse } from "../support/openapi.js";
import { startTestStack, type TestStack } from "../support/services.js";

// The per-partner bounds of POST /v1/connections through the gateway (docs/connections.md,
// "Bounds"): pending connections per partner and mode, and how often one connection reopens. Past
// either, 429 rate_limited with Retry-After, the same bytes for an address that resolves and one
// that does not (guarantee 1). The partner's request rate is lifted so that only these bounds act.

const LIVE_BOUND = 20;
let stack: TestStack;
let ops: ReturnType<typeof opsFor>;
let domain: string;
let sandbox: string;

type Res = Awaited<ReturnType<typeof call>>;
const post = (token: string, elder: string) => call(stack.baseUrl, token, "POST", "/v1/connections", { elder });
const del = (token: string, id: string) => call(stack.baseUrl, token, "DELETE", `/v1/connections/${id}`);

/** The n-th of many distinct well-formed addresses that no elder has. */
function unresolvable(n: number): string {
  let word = "";
  for (let i = n; word.length < 6 || i > 0; i = Math.floor(i / 26)) word += String.fromCharCode(97 + (i % 26));
  return `${word}.never.registered@${domain}`;
}
/** Everything a partner observes of an answer but Date and the random value of X-Request-Id. */
const observable = (r: Res) => ({
  status: r.status,
  headers: [...r.headers].filter(([name]) => name !== "date").map(([name, value]) => [name, name === "x-request-id" ? value.replace(/^req_[0-9A-Za-z]{22}$/, "req_ID") : value]),
  body: r.text,
});

async function partnerTokens(name: string) {
  const p = await ops.partnerCreate({ name });
  return {
    live: await accessToken(stack.baseUrl, p.live.client_id, p.live.client_secret),
    test: await accessToken(stack.baseUrl, p.test.client_id, p.test.client_secret),
  };
}

beforeAll(async () => {
  // The test credentials' bound keeps its default (100); the live one is lowered to keep the test short.
  stack = await startTestStack({ ...NO_RATE_LIMITS, PENDING_CONNECTIONS_PER_PARTNER: String(LIVE_BOUND) });
  ops = opsFor(stack.settings);
  const info = await ops.info();
  domain = info.address_domain;
  sandbox = info.sandbox_elder_address;
}, 180_000);
afterAll(async () => {
  await stack?.stop();
}, 120_000);

describe("pending connections per partner: a bound no credential can pass", () => {
  it("one test credential's 10,000 connection requests meet the bound: 100 pending, then one identical 429 with Retry-After", async () => {
    const { test } = await partnerTokens("Flood Pharmacy");
    const total = 10_000;
    const statuses = new Map<number, number>();
    const refusals = new Set<string>();
    let next = 0;
    const worker = async () => {
      for (let n = next++; n < total; n = next++) {
        const r = await post(test, unresolvable(n));
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status === 429) refusals.add(JSON.stringify(observable(r)));
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
    expect(Object.fromEntries(statuses)).toEqual({ 202: stack.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER, 429: total - stack.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER });
    expect(stack.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER).toBe(100);
    expect(refusals.size).toBe(1);
    const [only] = [...refusals].map((s) => JSON.parse(s) as ReturnType<typeof observable>);
    expect(JSON.parse(only!.body)).toEqual({ error: { type: "rate_limit_error", code: "rate_limited", message: expect.any(String) } });
    expect(Object.fromEntries(only!.headers)).toMatchObject({ "retry-after": "60" });

    // The sandbox elder, the one address a test credential resolves, gets the same answer.
    const real = await post(test, sandbox);
    expect(observable(real)).toEqual(only);
    validateResponse("POST", "/v1/connections", real.status, real.headers, real.text);
  }, 900_000);

  it("past the live bound, a new address that resolves and one that does not get the same 429, byte for byte; a slot freed is a slot to use", async () => {
    const { live } = await partnerTokens("Bound Clinic");
    const ids: string[] = [];
    for (let n = 0; n < LIVE_BOUND; n++) {
      const r = await post(live, n % 2 === 0 ? (await ops.elderCreate()).address : unresolvable(100_000 + n));
      expect(r.status).toBe(202);
      ids.push(r.json!.id as string);
    }
    const real = await post(live, (await ops.elderCreate()).address);
    const unknown = await post(live, unresolvable(200_000));
    expect(real.status).toBe(429);
    expect(observable(real)).toEqual(observable(unknown));
    // Another partner, and the other mode, have bounds of their own.
    expect((await post((await partnerTokens("Other Clinic")).live, unresolvable(200_001))).status).toBe(202);

    // The partner's own DELETE of a pending connection frees its slot.
    expect((await del(live, ids[1]!)).status).toBe(200);
    expect((await post(live, unresolvable(200_002))).status).toBe(202);
    expect((await post(live, unresolvable(200_003))).status).toBe(429);
  });
});

describe("a declining caregiver is asked again at most once per reopen interval", () => {
  it("a DELETE then POST loop reopens the connection once, then answers the same 429 for a resolvable and an unresolvable address", async () => {
    const { live } = await partnerTokens("Persistent Pharmacy");
    const loop = async (address: string, resolvable: boolean) => {
      const first = await post(live, address);
      expect(first.status).toBe(202);
      const id = first.json!.id as string;
      let asked = 1;
      const refusals: Res[] = [];
      for (let i = 0; i < 10; i++) {
        if (resolvable) await ops.connectionAct("decline", id);
        expect((await del(live, id)).status).toBe(200);
        const again = await post(live, address);
        if (again.status === 202) {
          expect(again.json).toEqual({ id, status: "pending" });
          asked++;
        } else {
          refusals.push(again);
          // Refused: the connection stays revoked, and the caregiver has nothing to decline.
          expect((await call(stack.baseUrl, live, "GET", `/v1/connections/${id}`)).json).toEqual({ id, status: "revoked" });
          break;
        }
      }
      return { asked, refusal: refusals[0] };
    };
    const real = await loop((await ops.elderCreate()).address, true);
    const unknown = await loop(unresolvable(300_000), false);
    // Asked at the first request and once again; the interval is 30 days.
    expect(real.asked).toBe(2);
    expect(unknown.asked).toBe(2);
    expect(real.refusal!.status).toBe(429);
    const retryAfter = Number(real.refusal!.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(stack.settings.CONNECTION_REOPEN_INTERVAL_SECONDS - 60);
    expect(retryAfter).toBeLessThanOrEqual(stack.settings.CONNECTION_REOPEN_INTERVAL_SECONDS);
    // The same answer, but for the seconds that passed between the two loops.
    const same = (r: Res) => ({ ...observable(r), headers: observable(r).headers.filter(([name]) => name !== "retry-after") });
    expect(same(unknown.refusal!)).toEqual(same(real.refusal!));
    expect(Math.abs(Number(unknown.refusal!.headers.get("retry-after")) - retryAfter)).toBeLessThanOrEqual(60);
    validateResponse("POST", "/v1/connections", real.refusal!.status, real.refusal!.headers, real.refusal!.text);
  });
});
