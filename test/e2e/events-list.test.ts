import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { startTestReceiver, type Behaviour, type TestReceiver } from "../support/webhook-receiver.js";

// GET /v1/events end to end: partners ask for connections through the gateway, the caregiver acts
// through the operator CLI's commands, real receivers on 127.0.0.1 get (or refuse) the deliveries,
// and the list is compared with what they were sent. Every answer is checked against the OpenAPI
// document by call().

interface Listed {
  status: number;
  text: string;
  json?: Record<string, unknown>;
}
interface Page {
  data: { id: string; type: string; created: number; data: { connection_id: string; status: string } }[];
  has_more: boolean;
}

const receivers: TestReceiver[] = [];
afterAll(() => Promise.all(receivers.map((r) => r.close())));

async function partner(s: TestStack, name: string, behaviour?: Behaviour | "no endpoint") {
  const ops = opsFor(s.settings);
  const receiver = behaviour === "no endpoint" ? undefined : await startTestReceiver("", behaviour);
  if (receiver) receivers.push(receiver);
  const created = await ops.partnerCreate({ name, ...(receiver ? { webhookUrl: receiver.url } : {}) });
  receiver?.useSecret(created.signing_secret);
  const token = await accessToken(s.baseUrl, created.live.client_id, created.live.client_secret);
  const testToken = () => accessToken(s.baseUrl, created.test.client_id, created.test.client_secret);
  const connect = async (): Promise<string> => {
    const elder = await ops.elderCreate();
    const res = await call(s.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
    expect(res.status).toBe(202);
    return res.json!.id as string;
  };
  const list = (query = "", bearer = token): Promise<Listed> => call(s.baseUrl, bearer, "GET", `/v1/events${query}`);
  /** Every page, following starting_after, newest first. */
  const listAll = async (query: Record<string, string> = {}, bearer = token): Promise<{ events: Page["data"]; pages: Page[]; texts: string[] }> => {
    const pages: Page[] = [];
    const texts: string[] = [];
    let after: string | undefined;
    for (;;) {
      const q = new URLSearchParams({ ...query, ...(after ? { starting_after: after } : {}) }).toString();
      const res = await list(q ? `?${q}` : "", bearer);
      expect(res.status).toBe(200);
      const page = res.json as unknown as Page;
      pages.push(page);
      texts.push(res.text);
      if (!page.has_more) break;
      after = page.data.at(-1)!.id;
    }
    return { events: pages.flatMap((p) => p.data), pages, texts };
  };
  /** Waits until the webhook service holds `n` events of the partner (the operator's view). */
  const stored = async (n: number) => {
    for (let i = 0; i < 200; i++) {
      const { deliveries } = await ops.webhookDeliveries(created.partner_id);
      if (deliveries.length >= n) return deliveries;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`${name}: fewer than ${n} events stored`);
  };
  return { id: created.partner_id, ops, receiver, token, testToken, connect, list, listAll, stored };
}

const distinctArrivals = (receiver: TestReceiver) => {
  const byId = new Map<string, string>();
  for (const a of receiver.arrivals) if (!byId.has(a.event.id)) byId.set(a.event.id, a.raw);
  return byId;
};

describe("GET /v1/events", () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack({ WEBHOOK_RETRY_BASE_SECONDS: "0.2", RATE_LIMIT_V1_PER_SECOND: "200" });
  });
  afterAll(() => stack?.stop());

  it("a partner whose endpoint was down lists exactly the events it was sent: the same ids and bodies, newest first, and no other partner's", async () => {
    const down = await partner(stack, "Events Down Endpoint", () => "fail");
    const other = await partner(stack, "Events Other Partner");
    const ids = [await down.connect(), await down.connect(), await down.connect()];
    for (const id of ids) await down.ops.connectionAct("approve", id);
    await down.ops.connectionAct("sever", ids[0]!);
    const otherId = await other.connect();
    await other.ops.connectionAct("approve", otherId);
    await other.receiver!.waitFor((a) => a.length >= 1, 20_000, "the other partner's event");
    await down.receiver!.waitFor(() => distinctArrivals(down.receiver!).size >= 4, 30_000, "a failed attempt of each of the four events");

    const sent = distinctArrivals(down.receiver!);
    expect(down.receiver!.arrivals.every((a) => a.outcome === "fail")).toBe(true);
    const { events, texts } = await down.listAll({ limit: "100" });
    expect(events.map((e) => e.id).sort()).toEqual([...sent.keys()].sort());
    // Byte for byte the body every delivery carried.
    for (const [id, raw] of sent) expect([id, texts[0]!.includes(raw)]).toEqual([id, true]);
    // Newest first: the sever came last.
    expect(events[0]).toMatchObject({ type: "connection.revoked", data: { connection_id: ids[0], status: "revoked" } });
    expect(events.slice(1).map((e) => e.type)).toEqual(["connection.approved", "connection.approved", "connection.approved"]);
    expect(new Set(events.map((e) => e.data.connection_id))).toEqual(new Set(ids));

    const otherEvents = (await other.listAll()).events;
    expect(otherEvents.map((e) => e.id)).toEqual([...distinctArrivals(other.receiver!).keys()]);
    expect(otherEvents.some((e) => sent.has(e.id))).toBe(false);
  });

  it("a partner with no webhook address lists its events all the same", async () => {
    const silent = await partner(stack, "Events No Endpoint", "no endpoint");
    const id = await silent.connect();
    await silent.ops.connectionAct("approve", id);
    await silent.ops.connectionAct("sever", id);
    const deliveries = await silent.stored(2);
    const { events } = await silent.listAll();
    expect(events.map((e) => e.id)).toEqual(deliveries.map((d) => d.event_id));
    expect(events.map((e) => [e.type, e.data])).toEqual([
      ["connection.revoked", { connection_id: id, status: "revoked" }],
      ["connection.approved", { connection_id: id, status: "approved" }],
    ]);
  });

  it("a caregiver decline never appears", async () => {
    const p = await partner(stack, "Events Declined Lab");
    const declined = await p.connect();
    await p.ops.connectionAct("decline", declined);
    // A sentinel after it: the same partner's events are stored in order.
    const sentinel = await p.connect();
    await p.ops.connectionAct("approve", sentinel);
    await p.receiver!.waitFor((a) => a.length >= 1, 20_000, "the sentinel");
    const { events } = await p.listAll();
    expect(events.map((e) => e.data.connection_id)).toEqual([sentinel]);
    expect(JSON.stringify(events)).not.toContain(declined);
  });

  it("pages with limit and starting_after, newest first, each event once; has_more says when to stop", async () => {
    const p = await partner(stack, "Events Paging Pharmacy");
    const ids = [await p.connect(), await p.connect(), await p.connect()];
    for (const id of ids) await p.ops.connectionAct("approve", id);
    await p.ops.connectionAct("sever", ids[1]!);
    await p.ops.connectionAct("sever", ids[2]!);
    await p.receiver!.waitFor((a) => a.length >= 5, 20_000, "five events");
    const whole = (await p.listAll({ limit: "100" })).events;
    expect(whole).toHaveLength(5);

    const paged = await p.listAll({ limit: "2" });
    expect(paged.pages.map((pg) => [pg.data.length, pg.has_more])).toEqual([
      [2, true],
      [2, true],
      [1, false],
    ]);
    expect(paged.events).toEqual(whole);
    // Newest first by the time they were recorded: the two severs came last.
    expect(whole.slice(0, 2).map((e) => e.type)).toEqual(["connection.revoked", "connection.revoked"]);
    expect(whole[0]!.data.connection_id).toBe(ids[2]);

    const first = (await p.list("")).json as unknown as Page;
    expect(first.data).toEqual(whole); // the default page (10) holds them all
    expect(first.has_more).toBe(false);
    const afterLast = (await p.list(`?starting_after=${whole.at(-1)!.id}`)).json as unknown as Page;
    expect(afterLast).toEqual({ data: [], has_more: false });
  });

  it("filters by type, and pages within the type", async () => {
    const p = await partner(stack, "Events Type Filter Clinic");
    const ids = [await p.connect(), await p.connect()];
    for (const id of ids) await p.ops.connectionAct("approve", id);
    await p.ops.connectionAct("sever", ids[0]!);
    await p.receiver!.waitFor((a) => a.length >= 3, 20_000, "three events");
    const revoked = await p.listAll({ type: "connection.revoked" });
    expect(revoked.events.map((e) => [e.type, e.data.connection_id])).toEqual([["connection.revoked", ids[0]]]);
    const approved = await p.listAll({ type: "connection.approved", limit: "1" });
    expect(approved.pages.map((pg) => pg.has_more)).toEqual([true, false]);
    expect(approved.events.map((e) => e.data.connection_id)).toEqual([ids[1], ids[0]]);

    const bad = await p.list("?type=connection.declined");
    expect(bad.status).toBe(400);
    expect(bad.json!.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request", param: "type" });
    expect((await p.list("?limit=0")).json!.error).toMatchObject({ code: "invalid_request", param: "limit" });
    expect((await p.list("?limit=101")).json!.error).toMatchObject({ code: "invalid_request", param: "limit" });
  });

  it("another partner's event id as starting_after is the same 400 as an unknown id: no oracle", async () => {
    const a = await partner(stack, "Events Cursor Owner");
    const b = await partner(stack, "Events Cursor Prober");
    const id = await a.connect();
    await a.ops.connectionAct("approve", id);
    await a.receiver!.waitFor((x) => x.length >= 1, 20_000, "the owner's event");
    const foreign = a.receiver!.arrivals[0]!.event.id;
    expect((await a.list(`?starting_after=${foreign}`)).json).toEqual({ data: [], has_more: false });

    const probe = await b.list(`?starting_after=${foreign}`);
    const unknown = await b.list(`?starting_after=evt_${"0".repeat(22)}`);
    const malformed = await b.list("?starting_after=con_nothing");
    expect(probe.status).toBe(400);
    expect(probe.json!.error).toEqual({ type: "invalid_request_error", code: "invalid_request", message: "starting_after is not one of your events.", param: "starting_after" });
    expect(unknown.text).toBe(probe.text);
    expect(malformed.text).toBe(probe.text);
  });

  it("requires connections:write: a files:write token gets 403 insufficient_scope; no bearer, 401", async () => {
    const p = await partner(stack, "Events Scope Lab");
    const ops = opsFor(stack.settings);
    const created = await ops.partnerCreate({ name: "Events Files Only" });
    const filesOnly = await accessToken(stack.baseUrl, created.live.client_id, created.live.client_secret, "files:write");
    const res = await p.list("", filesOnly);
    expect([res.status, (res.json!.error as { code: string }).code]).toEqual([403, "insufficient_scope"]);
    const none = await call(stack.baseUrl, undefined, "GET", "/v1/events");
    expect(none.status).toBe(401);
    const connectionsOnly = await accessToken(stack.baseUrl, created.live.client_id, created.live.client_secret, "connections:write");
    expect((await p.list("", connectionsOnly)).status).toBe(200);
  });
});

describe("GET /v1/events during an outage", () => {
  it("the webhook service down: a fast 503 service_unavailable with Retry-After, never a hang", async () => {
    const stack = await startTestStack();
    try {
      const p = await partner(stack, "Events Outage Clinic", "no endpoint");
      expect((await p.list()).status).toBe(200);
      await stack.services.webhook.stop();
      const started = performance.now();
      const res = await p.list();
      expect(performance.now() - started).toBeLessThan(5_000);
      expect([res.status, (res.json!.error as { code: string }).code]).toEqual([503, "service_unavailable"]);
      expect(res.text).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|webhook\.v1/);
    } finally {
      await stack.stop().catch(() => {});
    }
  });
});

describe("GET /v1/events, expiry and test mode", () => {
  let short: TestStack;
  beforeAll(async () => {
    short = await startTestStack({ WEBHOOK_RETRY_BASE_SECONDS: "0.2", CONNECTION_PENDING_TTL_SECONDS: "2", SANDBOX_APPROVAL_DELAY_SECONDS: "1" });
  });
  afterAll(() => short?.stop());

  it("an expiry never appears", async () => {
    const p = await partner(short, "Events Expiring Pharmacy");
    const expiring = await p.connect();
    for (let i = 0; i < 100; i++) {
      const res = await call(short.baseUrl, p.token, "GET", `/v1/connections/${expiring}`);
      if (res.json?.status === "expired") break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect((await call(short.baseUrl, p.token, "GET", `/v1/connections/${expiring}`)).json).toEqual({ id: expiring, status: "expired" });
    const sentinel = await p.connect();
    await p.ops.connectionAct("approve", sentinel);
    await p.receiver!.waitFor((a) => a.length >= 1, 20_000, "the sentinel");
    // The sentinel's event is stored after any event the expiry made (same partition, read in order).
    const { events } = await p.listAll();
    expect(events.map((e) => e.data.connection_id)).toEqual([sentinel]);
    expect(JSON.stringify(events)).not.toContain(expiring);
  });

  it("a test token lists only test events and a live token only live ones; the other mode's id is the unknown cursor's 400", async () => {
    const p = await partner(short, "Events Two Modes");
    const testToken = await p.testToken();
    const { sandbox_elder_address } = await p.ops.info();
    const sandbox = await call(short.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox_elder_address });
    expect(sandbox.status).toBe(202);
    const live = await p.connect();
    await p.ops.connectionAct("approve", live);
    await p.receiver!.waitFor((a) => a.length >= 2, 30_000, "the sandbox approval and the live approval");

    const testEvents = (await p.listAll({}, testToken)).events;
    const liveEvents = (await p.listAll()).events;
    expect(testEvents.map((e) => e.data.connection_id)).toEqual([sandbox.json!.id]);
    expect(liveEvents.map((e) => e.data.connection_id)).toEqual([live]);
    const byId = distinctArrivals(p.receiver!);
    expect(JSON.stringify(testEvents[0])).toBe(byId.get(testEvents[0]!.id));

    const crossed = await p.list(`?starting_after=${testEvents[0]!.id}`);
    const unknown = await p.list(`?starting_after=evt_${"1".repeat(22)}`);
    expect(crossed.status).toBe(400);
    expect(crossed.text).toBe(unknown.text);
  });
});
