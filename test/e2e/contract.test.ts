import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { databaseName } from "@pi/common/store/mongo";
import { MongoClient } from "mongodb";
import { accessToken, call, opsFor, requestToken } from "../support/partner-api.js";
import { sharedTestStack, stopSharedStacks, type TestStack } from "../support/services.js";

// The contract end to end: the walking skeleton through every service, and every answer checked
// against the OpenAPI document.

// One stack for the file; its partners' /v1 budget small enough for the 429 test to spend it. The
// 503 test stops its connection service, last.
const CONTRACT_STACK = { RATE_LIMIT_V1_PER_SECOND: "50" };
afterAll(stopSharedStacks);

describe("walking skeleton", () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await sharedTestStack(CONTRACT_STACK);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  describe("walking skeleton", () => {
    it("a partner created by the operator gets a token and requests a connection that is stored", async () => {
      const ops = opsFor(stack.settings);
      const partner = await ops.partnerCreate({ name: "Acme Pharmacy" });
      expect(partner.partner_id).toMatch(/^ptr_/);
      expect(partner.live.client_secret).not.toBe(partner.test.client_secret);

      const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
      const [, payload] = token.split(".");
      const claims = JSON.parse(Buffer.from(payload!, "base64url").toString()) as Record<string, unknown>;
      expect(claims).toMatchObject({
        sub: partner.partner_id,
        client_id: partner.live.client_id,
        mode: "live",
        scope: "connections:write files:write",
      });

      const elder = await ops.elderCreate();
      const res = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
      expect(res.status).toBe(202);
      expect(Object.keys(res.json!).sort()).toEqual(["id", "status"]);
      expect(res.json!.status).toBe("pending");
      expect(res.json!.id).toMatch(/^con_/);

      const client = await MongoClient.connect(stack.settings.MONGODB_URI);
      try {
        const stored = await client
          .db(databaseName(stack.settings.DATA_NAMESPACE, "connection"))
          .collection("connections")
          .findOne({ _id: res.json!.id as never });
        expect(stored).toMatchObject({ partnerId: partner.partner_id, address: elder.address, status: "pending" });
      } finally {
        await client.close();
      }
    });

    it("the gateway is ready only when every service answers its health check", async () => {
      const ready = await fetch(`${stack.baseUrl}/readyz`);
      expect(ready.status).toBe(200);
      const live = await fetch(`${stack.baseUrl}/healthz`);
      expect(live.status).toBe(200);
    });

    it("info names the address domain and the sandbox elder", async () => {
      const info = await opsFor(stack.settings).info();
      expect(info).toEqual({
        address_domain: stack.settings.ADDRESS_DOMAIN,
        sandbox_elder_address: `sandbox.test.elder@${stack.settings.ADDRESS_DOMAIN}`,
      });
    });
  });
});

describe("openapi contract", () => {
  // The e2e suite checks every answer against the OpenAPI document (call() and requestToken() run
  // validateResponse; the check itself: test/support/openapi.test.ts). Here the real stack's error
  // paths, through the validated helpers, answer as documented.

  const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";

  describe("the real stack's answers, validated against the document", () => {
    let stack: TestStack;
    let token: string;

    beforeAll(async () => {
      stack = await sharedTestStack(CONTRACT_STACK);
      const partner = await opsFor(stack.settings).partnerCreate({ name: "Contract Checks" });
      token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    });
    afterAll(() => stack?.stop());

    it("the token endpoint's answers, in both encodings", async () => {
      expect(
        (
          await requestToken(
            stack.baseUrl,
            { grant_type: "client_credentials", client_id: "cli_nobody", client_secret: "x" },
            "json",
          )
        ).status,
      ).toBe(400);
      expect((await requestToken(stack.baseUrl, { grant_type: "password" })).status).toBe(400);
    });

    it("the error paths of /v1: 401, 404, 405, 415, 400", async () => {
      expect((await call(stack.baseUrl, undefined, "GET", `/v1/connections/${CON}`)).status).toBe(401);
      expect((await call(stack.baseUrl, token, "GET", `/v1/connections/${CON}`)).status).toBe(404);
      expect((await call(stack.baseUrl, token, "GET", "/v1/files/file_0000000000000000000000")).status).toBe(404);
      expect((await call(stack.baseUrl, token, "GET", "/v1/elders")).status).toBe(404);
      expect((await call(stack.baseUrl, token, "GET", "/v1/connections")).status).toBe(405);
      expect((await call(stack.baseUrl, token, "POST", "/v1/connections")).status).toBe(415);
      expect((await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: "nope" })).status).toBe(400);
      expect((await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: "a".repeat(20_000) })).status).toBe(
        400,
      );
    });

    it("a connection's life: 202 pending, 200, 200 revoked", async () => {
      const elder = (await opsFor(stack.settings).elderCreate()).address;
      const created = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder });
      expect(created.status).toBe(202);
      const id = created.json!.id as string;
      expect((await call(stack.baseUrl, token, "GET", `/v1/connections/${id}`)).json).toEqual({
        id,
        status: "pending",
      });
      expect((await call(stack.baseUrl, token, "DELETE", `/v1/connections/${id}`)).json).toEqual({
        id,
        status: "revoked",
      });
    });

    it("the events list: 200 with the list object, 400 with param", async () => {
      expect((await call(stack.baseUrl, token, "GET", "/v1/events")).json).toEqual({ data: [], has_more: false });
      expect((await call(stack.baseUrl, token, "GET", "/v1/events?limit=100&type=connection.revoked")).status).toBe(
        200,
      );
      expect((await call(stack.baseUrl, token, "GET", "/v1/events?limit=1000")).status).toBe(400);
      expect((await call(stack.baseUrl, token, "GET", `/v1/events?starting_after=evt_${"0".repeat(22)}`)).status).toBe(
        400,
      );
    });

    it("429 rate_limited with Retry-After once the partner's budget is spent", async () => {
      // Bursts until one is limited: on a busy machine a single burst may spread over more than the
      // limiter's one-second window.
      let limited: Awaited<ReturnType<typeof call>>[] = [];
      for (let burst = 0; burst < 20 && limited.length === 0; burst++) {
        const answers = await Promise.all(
          Array.from({ length: 150 }, () => call(stack.baseUrl, token, "GET", `/v1/connections/${CON}`)),
        );
        limited = answers.filter((a) => a.status === 429);
      }
      expect(limited.length).toBeGreaterThan(0);
      expect(Number(limited[0]!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    });

    it("503 service_unavailable with Retry-After when an internal service is down", async () => {
      // A partner of its own: the 429 test's budget may not be back yet (a burst can straddle windows).
      const fresh = await opsFor(stack.settings).partnerCreate({ name: "Outage Checks" });
      const freshToken = await accessToken(stack.baseUrl, fresh.live.client_id, fresh.live.client_secret);
      await stack.services.connection.stop();
      const res = await call(stack.baseUrl, freshToken, "GET", `/v1/connections/${CON}`);
      expect(res.status).toBe(503);
      expect(res.json).toMatchObject({ error: { code: "service_unavailable" } });
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(res.text).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|connection\.v1/);
    });
  });
});
