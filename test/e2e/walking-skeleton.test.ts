import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";

let stack: TestStack;

beforeAll(async () => {
  stack = await startTestStack();
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
    expect(claims).toMatchObject({ sub: partner.partner_id, client_id: partner.live.client_id, mode: "live", scope: "connections:write files:write" });

    const elder = await ops.elderCreate();
    const res = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
    expect(res.status).toBe(202);
    expect(Object.keys(res.json!).sort()).toEqual(["id", "status"]);
    expect(res.json!.status).toBe("pending");
    expect(res.json!.id).toMatch(/^con_/);

    const client = await MongoClient.connect(stack.settings.MONGODB_URI);
    try {
      const stored = await client.db(databaseName(stack.settings.DATA_NAMESPACE, "connection")).collection("connections").findOne({ _id: res.json!.id as never });
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
    expect(info).toEqual({ address_domain: stack.settings.ADDRESS_DOMAIN, sandbox_elder_address: `sandbox.test.elder@${stack.settings.ADDRESS_DOMAIN}` });
  });
});
