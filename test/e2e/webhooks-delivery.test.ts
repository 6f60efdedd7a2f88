import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { startTestReceiver, type Behaviour, type TestReceiver } from "../support/webhook-receiver.js";

// Webhooks end to end: the partner asks for a connection through the gateway, the caregiver acts
// through the operator CLI's commands, and a real HTTP receiver on 127.0.0.1 verifies every
// delivery with the receiver that docs/webhooks.md shows.

let stack: TestStack;
const receivers: TestReceiver[] = [];

async function partnerWithReceiver(s: TestStack, name: string, behaviour?: Behaviour) {
  const receiver = await startTestReceiver("", behaviour);
  receivers.push(receiver);
  const ops = opsFor(s.settings);
  const partner = await ops.partnerCreate({ name, webhookUrl: receiver.url });
  receiver.useSecret(partner.signing_secret);
  const token = await accessToken(s.baseUrl, partner.live.client_id, partner.live.client_secret);
  /** A new elder and this partner's pending connection to it. */
  const connect = async (): Promise<string> => {
    const elder = await ops.elderCreate();
    const res = await call(s.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
    expect(res.status).toBe(202);
    return res.json!.id as string;
  };
  return { partner, receiver, ops, token, connect };
}

beforeAll(async () => {
  stack = await startTestStack({ WEBHOOK_RETRY_BASE_SECONDS: "0.2" });
});
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.close()));
  await stack?.stop();
});

describe("webhooks end to end", () => {
  it("caregiver approve and sever send connection.approved then connection.revoked, signed and verifiable", async () => {
    const { partner, receiver, ops, connect } = await partnerWithReceiver(stack, "E2E Pharmacy");
    const id = await connect();
    expect(await ops.connectionAct("approve", id)).toEqual({ id, internal_status: "approved" });
    await receiver.waitFor((a) => a.length >= 1, 20_000, "connection.approved");
    expect(await ops.connectionAct("sever", id)).toEqual({ id, internal_status: "revoked" });
    await receiver.waitFor((a) => a.length >= 2, 20_000, "connection.revoked");

    expect(receiver.rejected).toEqual([]);
    const [approved, revoked] = receiver.arrivals.map((a) => a.event);
    expect(approved).toEqual({ id: expect.stringMatching(/^evt_/), type: "connection.approved", created: expect.any(Number), data: { connection_id: id, status: "approved" } });
    expect(revoked).toEqual({ id: expect.stringMatching(/^evt_/), type: "connection.revoked", created: expect.any(Number), data: { connection_id: id, status: "revoked" } });
    expect(Math.abs(approved!.created - Date.now() / 1000)).toBeLessThan(120);
    expect(revoked!.created).toBeGreaterThanOrEqual(approved!.created);

    const listed = await ops.webhookDeliveries(partner.partner_id);
    expect(listed.deliveries.map((d) => d.type).sort()).toEqual(["connection.approved", "connection.revoked"]);
  });

  it("the partner's own DELETE of an approved connection sends connection.revoked", async () => {
    const { receiver, ops, token, connect } = await partnerWithReceiver(stack, "E2E Deleting Clinic");
    const id = await connect();
    await ops.connectionAct("approve", id);
    await receiver.waitFor((a) => a.length >= 1);
    const res = await call(stack.baseUrl, token, "DELETE", `/v1/connections/${id}`);
    expect(res.status).toBe(200);
    await receiver.waitFor((a) => a.length >= 2, 20_000, "connection.revoked");
    expect(receiver.arrivals[1]!.event).toMatchObject({ type: "connection.revoked", data: { connection_id: id, status: "revoked" } });
  });

  it("a caregiver decline sends nothing", async () => {
    const { partner, receiver, ops, connect } = await partnerWithReceiver(stack, "E2E Declined Lab");
    const declined = await connect();
    expect(await ops.connectionAct("decline", declined)).toEqual({ id: declined, internal_status: "declined" });
    // An approval after it is a sentinel: the same partner's events travel in order.
    const sentinel = await connect();
    await ops.connectionAct("approve", sentinel);
    await receiver.waitFor((a) => a.length >= 1, 20_000, "the sentinel");
    // Its event is stored after any event the decline made (same partition, read in order).
    expect((await ops.webhookDeliveries(partner.partner_id)).deliveries).toHaveLength(1);
    expect(receiver.arrivals.map((a) => a.event.data.connection_id)).toEqual([sentinel]);
  });

  it("a receiver that fails the first attempts gets the same evt_ id and body again until it answers 2xx", async () => {
    const { partner, receiver, ops, connect } = await partnerWithReceiver(stack, "E2E Flaky Clinic", (_e, nth) => (nth <= 2 ? "fail" : "ok"));
    const id = await connect();
    await ops.connectionAct("approve", id);
    await receiver.waitFor((a) => a.some((x) => x.outcome === "ok"), 30_000, "a 2xx");
    expect(receiver.arrivals.map((a) => a.outcome)).toEqual(["fail", "fail", "ok"]);
    expect(new Set(receiver.arrivals.map((a) => a.event.id)).size).toBe(1);
    expect(new Set(receiver.arrivals.map((a) => a.raw)).size).toBe(1);
    const delivered = async () => (await ops.webhookDeliveries(partner.partner_id)).deliveries[0];
    for (let i = 0; i < 50 && (await delivered())?.state !== "delivered"; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await delivered()).toMatchObject({ event_id: receiver.arrivals[0]!.event.id, attempts: 3, state: "delivered", next_attempt_at: null });
  });

  it("one partner's dead endpoint (accepts, never answers) does not delay another partner's events", async () => {
    const dead = await partnerWithReceiver(stack, "E2E Dead Endpoint", () => "hang");
    const live = await partnerWithReceiver(stack, "E2E Healthy Endpoint");
    const deadIds = await Promise.all(Array.from({ length: 12 }, () => dead.connect()));
    for (const id of deadIds) await dead.ops.connectionAct("approve", id);
    // The dead endpoint now holds requests open (at most its share of the sender's slots).
    await dead.receiver.waitFor((a) => a.length >= 8, 20_000, "the dead endpoint to be busy");

    const liveIds = await Promise.all(Array.from({ length: 3 }, () => live.connect()));
    for (const id of liveIds) await live.ops.connectionAct("approve", id);
    await live.receiver.waitFor((a) => a.length >= 3, 20_000, "the healthy partner's events");

    // Every attempt at the dead endpoint is still waiting for its answer (the timeout is 10 s):
    // the healthy partner's events did not wait behind them.
    const deadDeliveries = (await dead.ops.webhookDeliveries(dead.partner.partner_id)).deliveries;
    expect(deadDeliveries).toHaveLength(12);
    expect(deadDeliveries.every((d) => d.attempts === 0 && d.state === "pending")).toBe(true);
    expect(new Set(live.receiver.arrivals.map((a) => a.event.data.connection_id))).toEqual(new Set(liveIds));
    // Only a bounded share of the sender's slots went to the dead endpoint.
    expect(dead.receiver.arrivals.length).toBeLessThanOrEqual(8);
  });
});

describe("webhooks, expiry and test mode", () => {
  let short: TestStack;
  beforeAll(async () => {
    short = await startTestStack({ WEBHOOK_RETRY_BASE_SECONDS: "0.2", CONNECTION_PENDING_TTL_SECONDS: "2", SANDBOX_APPROVAL_DELAY_SECONDS: "1" });
  });
  afterAll(() => short?.stop());

  it("a test connection's automatic approval sends a signed connection.approved to the same address", async () => {
    const { partner, receiver, ops } = await partnerWithReceiver(short, "E2E Sandbox Pharmacy");
    const testToken = await accessToken(short.baseUrl, partner.test.client_id, partner.test.client_secret);
    const { sandbox_elder_address } = await ops.info();
    const res = await call(short.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox_elder_address });
    expect(res.status).toBe(202);
    await receiver.waitFor((a) => a.length >= 1, 30_000, "the sandbox approval's webhook");
    expect(receiver.rejected).toEqual([]);
    expect(receiver.arrivals[0]!.event).toMatchObject({ type: "connection.approved", data: { connection_id: res.json!.id, status: "approved" } });
  });

  it("a pending connection that expires sends nothing", async () => {
    const { partner, receiver, ops, token, connect } = await partnerWithReceiver(short, "E2E Expiring Pharmacy");
    const expiring = await connect();
    for (let i = 0; i < 100; i++) {
      const res = await call(short.baseUrl, token, "GET", `/v1/connections/${expiring}`);
      if (res.json?.status === "expired") break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect((await call(short.baseUrl, token, "GET", `/v1/connections/${expiring}`)).json).toEqual({ id: expiring, status: "expired" });
    const sentinel = await connect();
    await ops.connectionAct("approve", sentinel);
    await receiver.waitFor((a) => a.length >= 1, 20_000, "the sentinel");
    // Its event is stored after any event the expiry made (same partition, read in order).
    expect((await ops.webhookDeliveries(partner.partner_id)).deliveries).toHaveLength(1);
    expect(receiver.arrivals.map((a) => a.event.data.connection_id)).toEqual([sentinel]);
  });
});
