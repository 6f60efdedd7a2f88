import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { sharedTestStack, startTestStack, stopSharedStacks, type TestStack } from "../support/services.js";
import { type Behaviour, startTestReceiver, type TestReceiver } from "../support/webhook-receiver.js";

// Webhooks and the event list end to end: partners ask for connections through the gateway, the
// caregiver acts through the operator commands, and real receivers on 127.0.0.1 verify every
// delivery as docs/webhooks.md shows; GET /v1/events is compared with what they were sent.

afterAll(stopSharedStacks);

describe("webhooks delivery", () => {
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
      expect(approved).toEqual({
        id: expect.stringMatching(/^evt_/),
        type: "connection.approved",
        created: expect.any(Number),
        data: { connection_id: id, status: "approved" },
      });
      expect(revoked).toEqual({
        id: expect.stringMatching(/^evt_/),
        type: "connection.revoked",
        created: expect.any(Number),
        data: { connection_id: id, status: "revoked" },
      });
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
      expect(receiver.arrivals[1]!.event).toMatchObject({
        type: "connection.revoked",
        data: { connection_id: id, status: "revoked" },
      });
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
      const { partner, receiver, ops, connect } = await partnerWithReceiver(stack, "E2E Flaky Clinic", (_e, nth) =>
        nth <= 2 ? "fail" : "ok",
      );
      const id = await connect();
      await ops.connectionAct("approve", id);
      await receiver.waitFor((a) => a.some((x) => x.outcome === "ok"), 30_000, "a 2xx");
      expect(receiver.arrivals.map((a) => a.outcome)).toEqual(["fail", "fail", "ok"]);
      expect(new Set(receiver.arrivals.map((a) => a.event.id)).size).toBe(1);
      expect(new Set(receiver.arrivals.map((a) => a.raw)).size).toBe(1);
      const delivered = async () => (await ops.webhookDeliveries(partner.partner_id)).deliveries[0];
      for (let i = 0; i < 50 && (await delivered())?.state !== "delivered"; i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(await delivered()).toMatchObject({
        event_id: receiver.arrivals[0]!.event.id,
        attempts: 3,
        state: "delivered",
        next_attempt_at: null,
      });
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
      short = await sharedTestStack({
        WEBHOOK_RETRY_BASE_SECONDS: "0.2",
        CONNECTION_PENDING_TTL_SECONDS: "2",
        SANDBOX_APPROVAL_DELAY_SECONDS: "1",
      });
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
      expect(receiver.arrivals[0]!.event).toMatchObject({
        type: "connection.approved",
        data: { connection_id: res.json!.id, status: "approved" },
      });
    });

    it("a pending connection that expires sends nothing", async () => {
      const { partner, receiver, ops, token, connect } = await partnerWithReceiver(short, "E2E Expiring Pharmacy");
      const expiring = await connect();
      for (let i = 0; i < 100; i++) {
        const res = await call(short.baseUrl, token, "GET", `/v1/connections/${expiring}`);
        if (res.json?.status === "expired") break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect((await call(short.baseUrl, token, "GET", `/v1/connections/${expiring}`)).json).toEqual({
        id: expiring,
        status: "expired",
      });
      const sentinel = await connect();
      await ops.connectionAct("approve", sentinel);
      await receiver.waitFor((a) => a.length >= 1, 20_000, "the sentinel");
      // Its event is stored after any event the expiry made (same partition, read in order).
      expect((await ops.webhookDeliveries(partner.partner_id)).deliveries).toHaveLength(1);
      expect(receiver.arrivals.map((a) => a.event.data.connection_id)).toEqual([sentinel]);
    });
  });
});

describe("events list", () => {
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
    const listAll = async (
      query: Record<string, string> = {},
      bearer = token,
    ): Promise<{ events: Page["data"]; pages: Page[]; texts: string[] }> => {
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
      await down.receiver!.waitFor(
        () => distinctArrivals(down.receiver!).size >= 4,
        30_000,
        "a failed attempt of each of the four events",
      );

      const sent = distinctArrivals(down.receiver!);
      expect(down.receiver!.arrivals.every((a) => a.outcome === "fail")).toBe(true);
      const { events, texts } = await down.listAll({ limit: "100" });
      expect(events.map((e) => e.id).sort()).toEqual([...sent.keys()].sort());
      // Byte for byte the body every delivery carried.
      for (const [id, raw] of sent) expect([id, texts[0]!.includes(raw)]).toEqual([id, true]);
      // Newest first: the sever came last.
      expect(events[0]).toMatchObject({
        type: "connection.revoked",
        data: { connection_id: ids[0], status: "revoked" },
      });
      expect(events.slice(1).map((e) => e.type)).toEqual([
        "connection.approved",
        "connection.approved",
        "connection.approved",
      ]);
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
      expect(probe.json!.error).toEqual({
        type: "invalid_request_error",
        code: "invalid_request",
        message: "starting_after is not one of your events.",
        param: "starting_after",
      });
      expect(unknown.text).toBe(probe.text);
      expect(malformed.text).toBe(probe.text);
    });
  });

  describe("GET /v1/events, expiry and test mode", () => {
    let short: TestStack;
    beforeAll(async () => {
      short = await sharedTestStack({
        WEBHOOK_RETRY_BASE_SECONDS: "0.2",
        CONNECTION_PENDING_TTL_SECONDS: "2",
        SANDBOX_APPROVAL_DELAY_SECONDS: "1",
      });
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
      expect((await call(short.baseUrl, p.token, "GET", `/v1/connections/${expiring}`)).json).toEqual({
        id: expiring,
        status: "expired",
      });
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
});
