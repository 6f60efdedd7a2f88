import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { basicAuthorization, call, opsFor, requestToken } from "../support/partner-api.js";

// HTTP Basic client authentication at POST /oauth/token (RFC 6749 section 2.3.1), beside the body
// fields: docs/authentication.md, "Client authentication".

let stack: TestStack;
let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;
const TOKEN_BUDGET = 60;

beforeAll(async () => {
  // One trusted proxy hop: the rate-limit test takes a client IP (X-Forwarded-For) of its own.
  stack = await startTestStack({ RATE_LIMIT_TOKEN_PER_MINUTE: String(TOKEN_BUDGET), RATE_LIMIT_V1_PER_SECOND: "1000", TRUSTED_PROXY_HOPS: "1" });
  partner = await opsFor(stack.settings).partnerCreate({ name: "Basic Auth Lab" });
});
afterAll(async () => {
  await stack?.stop();
});

const grant = { grant_type: "client_credentials" };
const basic = () => ({ authorization: basicAuthorization(partner.live.client_id, partner.live.client_secret) });

describe("token endpoint: HTTP Basic client authentication", () => {
  it.each(["form", "json"] as const)("200 with a Basic header and a %s body of grant_type alone; the token works on /v1", async (encoding) => {
    const res = await requestToken(stack.baseUrl, grant, encoding, basic());
    expect(res.status).toBe(200);
    const body = JSON.parse(res.text) as { access_token: string; scope: string };
    expect(body.scope).toBe("connections:write files:write");
    const read = await call(stack.baseUrl, body.access_token, "GET", "/v1/connections/con_00000000000000000000000000");
    expect(read.status).toBe(404);
  });

  it("scope narrowing works the same with Basic", async () => {
    const res = await requestToken(stack.baseUrl, { ...grant, scope: "files:write" }, "form", basic());
    expect(JSON.parse(res.text)).toMatchObject({ scope: "files:write" });
  });

  it("a repeated client_id in the body naming the same client is accepted", async () => {
    expect((await requestToken(stack.baseUrl, { ...grant, client_id: partner.live.client_id }, "form", basic())).status).toBe(200);
  });

  it("both methods at once are invalid_request, even when both are right", async () => {
    const res = await requestToken(stack.baseUrl, { ...grant, client_id: partner.live.client_id, client_secret: partner.live.client_secret }, "form", basic());
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({ error: "invalid_request" });
  });

  it.each([
    ["garbage", "Basic %%%"],
    ["no colon", `Basic ${Buffer.from("justanid").toString("base64")}`],
    ["empty secret", `Basic ${Buffer.from(`${"cli_x"}:`).toString("base64")}`],
    ["another scheme", "Bearer abc"],
    ["a header far too long for a credential", `Basic ${Buffer.from(`cli_x:${"s".repeat(4000)}`).toString("base64")}`],
  ])("a malformed Authorization header (%s) is 400 invalid_request, never a 5xx", async (_why, authorization) => {
    const res = await requestToken(stack.baseUrl, grant, "form", { authorization });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({ error: "invalid_request" });
  });

  it("a wrong secret by Basic is the body method's invalid_client, byte for byte", async () => {
    const byBasic = await requestToken(stack.baseUrl, grant, "form", { authorization: basicAuthorization(partner.live.client_id, "sk_live_wrong") });
    const byBody = await requestToken(stack.baseUrl, { ...grant, client_id: partner.live.client_id, client_secret: "sk_live_wrong" });
    expect(byBasic.status).toBe(400);
    expect(byBasic.text).toBe(byBody.text);
    expect(byBasic.headers.get("www-authenticate")).toBeNull();
  });

  it("the per-IP token limit counts Basic and body requests alike", async () => {
    // A fresh client IP; half its budget by Basic, half by the body, all at once (inside one window).
    const ip = { "x-forwarded-for": "203.0.113.7" };
    const body = { ...grant, client_id: partner.live.client_id, client_secret: partner.live.client_secret };
    const answers = await Promise.all(
      Array.from({ length: TOKEN_BUDGET }, (_, i) =>
        i % 2 === 0 ? requestToken(stack.baseUrl, grant, "form", { ...basic(), ...ip }) : requestToken(stack.baseUrl, body, "form", ip),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(TOKEN_BUDGET).fill(200));
    // Both kinds were counted: the budget is gone for either method.
    const basicAfter = await requestToken(stack.baseUrl, grant, "form", { ...basic(), ...ip });
    const bodyAfter = await requestToken(stack.baseUrl, body, "form", ip);
    expect([basicAfter.status, bodyAfter.status]).toEqual([429, 429]);
    expect(Number(basicAfter.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Another client IP still has its own budget.
    expect((await requestToken(stack.baseUrl, grant, "form", { ...basic(), "x-forwarded-for": "203.0.113.8" })).status).toBe(200);
  }, 180_000);
});
