import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { type RpcError, Status } from "@pi/common/rpc/errors";
import { clientsFor } from "@pi/common/rpc/clients";
import { databaseName } from "@pi/common/store/mongo";
import { newId } from "@pi/common/rules/ids";
import { commonv1 } from "@pi/proto";
import { MongoClient } from "mongodb";
import { describeFailure } from "../../services/ops/src/commands.js";
import { NO_RATE_LIMITS } from "../support/auth.js";
import { collectConnectionEvents, type EventCollector, settled } from "../support/connection-events.js";
import { validateResponse } from "../support/openapi.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { as, startTestStack, type TestStack } from "../support/services.js";

// Connections end to end: the three endpoints and the caregiver's acts, the per-partner bounds, and
// pending windows that expire. Edge-only checks (bodies, ids, methods) are unit tests of the gateway
// (services/gateway/test).

describe("connections api", () => {
  // The three connection endpoints and the caregiver's acts, end to end: gateway, connection service,
  // the MongoDB-wire server, Kafka. Sandbox approval is set to 1 s here so the sandbox rules can be watched at work.

  let stack: TestStack;
  let events: EventCollector;
  let ops: ReturnType<typeof opsFor>;
  let mongo: MongoClient;
  let sandbox: string;
  let domain: string;
  const tokens = {} as Record<"aLive" | "aTest" | "bLive" | "aFilesOnly", string>;
  const partners = {} as Record<"a" | "b", string>;

  type Res = Awaited<ReturnType<typeof call>>;
  const post = (token: string, elder: unknown) => call(stack.baseUrl, token, "POST", "/v1/connections", { elder });
  const get = (token: string, id: string) => call(stack.baseUrl, token, "GET", `/v1/connections/${id}`);
  const del = (token: string, id: string) => call(stack.baseUrl, token, "DELETE", `/v1/connections/${id}`);
  const create = async (token: string, elder: string) => {
    const res = await post(token, elder);
    expect(res.status).toBe(202);
    return res.json!.id as string;
  };
  const statusOf = async (token: string, id: string) => (await get(token, id)).json!.status;
  /**
   * Everything a partner can observe of a response but the Date header and the value of the per-request
   * X-Request-Id (random for every request, so it tells nothing; its presence and shape still count).
   */
  const observable = (r: Res) => ({
    status: r.status,
    headers: [...r.headers]
      .filter(([name]) => name !== "date")
      .map(([name, value]) => [
        name,
        name === "x-request-id" ? value.replace(/^req_[0-9A-Za-z]{22}$/, "req_ID") : value,
      ]),
    body: r.text,
  });
  /** Same, with the connection id masked (two different connections never share an id). */
  const observableMasked = (r: Res) => {
    const o = observable(r);
    return { ...o, body: o.body.replace(r.json!.id as string, "con_ID") };
  };
  const unresolvable = () =>
    `${newId("req")
      .slice(4, 14)
      .replace(/[^a-z]/gi, "x")
      .toLowerCase()}.never.registered@${domain}`;
  const rpcError = async (p: Promise<unknown>) => {
    try {
      await p;
    } catch (err) {
      return err as RpcError;
    }
    throw new Error("expected the call to fail");
  };
  const connectionsCollection = () =>
    mongo.db(databaseName(stack.settings.DATA_NAMESPACE, "connection")).collection("connections");
  /** Until every event the changes of these connections publish has been read (a sentinel, no fixed wait). */
  const settle = (...ids: string[]) => settled(events, connectionsCollection(), ...ids);
  const storedStatus = async (id: string) => (await connectionsCollection().findOne({ _id: id as never }))?.status;

  beforeAll(async () => {
    stack = await startTestStack({ SANDBOX_APPROVAL_DELAY_SECONDS: "1" });
    events = await collectConnectionEvents(stack.settings.KAFKA_BROKERS, stack.settings.DATA_NAMESPACE);
    mongo = await MongoClient.connect(stack.settings.MONGODB_URI);
    ops = opsFor(stack.settings);
    const info = await ops.info();
    sandbox = info.sandbox_elder_address;
    domain = info.address_domain;
    const a = await ops.partnerCreate({ name: "Pharmacy A" });
    const b = await ops.partnerCreate({ name: "Clinic B" });
    partners.a = a.partner_id;
    partners.b = b.partner_id;
    tokens.aLive = await accessToken(stack.baseUrl, a.live.client_id, a.live.client_secret);
    tokens.aTest = await accessToken(stack.baseUrl, a.test.client_id, a.test.client_secret);
    tokens.bLive = await accessToken(stack.baseUrl, b.live.client_id, b.live.client_secret);
    tokens.aFilesOnly = await accessToken(stack.baseUrl, a.live.client_id, a.live.client_secret, "files:write");
  });

  afterAll(async () => {
    await events?.stop();
    await mongo?.close();
    await stack?.stop();
  });

  describe("POST /v1/connections", () => {
    it("guarantee 1: a well-formed address answers identically whether or not it resolves (status, headers, body)", async () => {
      const real = (await ops.elderCreate()).address;
      const resolved = await post(tokens.aLive, real);
      const unresolved = await post(tokens.aLive, unresolvable());
      expect(resolved.status).toBe(202);
      expect(resolved.json).toEqual({ id: expect.stringMatching(/^con_/), status: "pending" });
      expect(observableMasked(unresolved)).toEqual(observableMasked(resolved));
    });

    it("guarantee 1 in test mode: the sandbox and a real address (unresolvable to a test token) answer identically", async () => {
      const real = (await ops.elderCreate()).address;
      expect(observableMasked(await post(tokens.aTest, real))).toEqual(
        observableMasked(await post(tokens.aTest, sandbox)),
      );
    });

    it("guarantee 1 with a live token: the sandbox address (unresolvable to it) answers like a real one", async () => {
      const real = (await ops.elderCreate()).address;
      expect(observableMasked(await post(tokens.aLive, sandbox))).toEqual(
        observableMasked(await post(tokens.aLive, real)),
      );
    });

    it("the same (partner, address) returns the same id, whatever the letter case; another partner gets another id", async () => {
      const real = (await ops.elderCreate()).address;
      const id = await create(tokens.aLive, real);
      expect(await create(tokens.aLive, real.toUpperCase())).toBe(id);
      expect(await create(tokens.bLive, real)).not.toBe(id);
    });

    it("concurrent creates: ten simultaneous POSTs for one (partner, address) give one id", async () => {
      for (const address of [(await ops.elderCreate()).address, unresolvable()]) {
        const responses = await Promise.all(Array.from({ length: 10 }, () => post(tokens.aLive, address)));
        expect(responses.map((r) => r.status)).toEqual(Array(10).fill(202));
        expect(new Set(responses.map((r) => r.json!.id)).size).toBe(1);
      }
    });
  });

  describe("GET and DELETE /v1/connections/{id}", () => {
    it("GET answers the partner's own connection with exactly id and status", async () => {
      const id = await create(tokens.aLive, (await ops.elderCreate()).address);
      const res = await get(tokens.aLive, id);
      expect(res.status).toBe(200);
      expect(res.json).toEqual({ id, status: "pending" });
    });

    it("guarantee 3: unknown, malformed, another partner's and the other mode's ids give the identical 404 on GET and DELETE", async () => {
      const foreign = await create(tokens.bLive, (await ops.elderCreate()).address);
      const otherMode = await create(tokens.aLive, (await ops.elderCreate()).address);
      const ids = [newId("con"), foreign, "nope", "con_", "con_has-dash", `con_${"x".repeat(300)}`, "con_%00"];
      for (const method of [get, del]) {
        const reference = await method(tokens.aLive, newId("con"));
        expect(reference.status).toBe(404);
        expect(reference.json).toEqual({
          error: { type: "invalid_request_error", code: "not_found", message: expect.any(String) },
        });
        for (const id of ids) expect(observable(await method(tokens.aLive, id))).toEqual(observable(reference));
        expect(observable(await method(tokens.aTest, otherMode))).toEqual(observable(reference));
      }
      expect(await statusOf(tokens.bLive, foreign)).toBe("pending");
      expect(await statusOf(tokens.aLive, otherMode)).toBe("pending");
    });

    it("DELETE is idempotent: always 200 with status revoked, and no event for a connection that was not approved", async () => {
      for (const address of [(await ops.elderCreate()).address, unresolvable()]) {
        const id = await create(tokens.aLive, address);
        for (let i = 0; i < 3; i++) {
          const res = await del(tokens.aLive, id);
          expect(res.status).toBe(200);
          expect(res.json).toEqual({ id, status: "revoked" });
        }
        expect(await statusOf(tokens.aLive, id)).toBe("revoked");
        await settle(id);
        expect(events.of(id)).toEqual([]);
      }
    });

    it("DELETE of an approved connection emits exactly one connection.revoked, however often it is repeated", async () => {
      const id = await create(tokens.aLive, (await ops.elderCreate()).address);
      await ops.connectionAct("approve", id);
      await del(tokens.aLive, id);
      await del(tokens.aLive, id);
      await events.waitFor(() => events.of(id).length >= 2);
      await settle(id);
      expect(events.of(id).map((e) => [e.type, e.status])).toEqual([
        ["connection.approved", "approved"],
        ["connection.revoked", "revoked"],
      ]);
    });
  });

  describe("transitions through the caregiver's acts", () => {
    it("pending -> approved by the caregiver: reads approved and emits connection.approved keyed by the partner", async () => {
      const id = await create(tokens.aLive, (await ops.elderCreate()).address);
      expect(await ops.connectionAct("approve", id)).toEqual({ id, internal_status: "approved" });
      expect(await statusOf(tokens.aLive, id)).toBe("approved");
      expect(await ops.connectionAct("approve", id)).toEqual({ id, internal_status: "approved" });
      await events.waitFor(() => events.of(id).length === 1);
      const [published] = events.events.filter((e) => e.event.connectionId === id);
      expect(published!.key).toBe(partners.a);
      expect(published!.event).toMatchObject({
        type: "connection.approved",
        status: "approved",
        partnerId: partners.a,
        mode: commonv1.Mode.LIVE,
      });
      expect(published!.event.eventId).toMatch(/^evt_/);
      await settle(id);
      expect(events.of(id)).toHaveLength(1);
    });

    it("guarantee 4: a declined connection reads pending, byte for byte like an undecided one, and emits nothing", async () => {
      const declined = await create(tokens.aLive, (await ops.elderCreate()).address);
      const undecided = await create(tokens.aLive, (await ops.elderCreate()).address);
      expect(await ops.connectionAct("decline", declined)).toEqual({ id: declined, internal_status: "declined" });
      expect(observableMasked(await get(tokens.aLive, declined))).toEqual(
        observableMasked(await get(tokens.aLive, undecided)),
      );
      await settle(declined);
      expect(events.of(declined)).toEqual([]);
      expect(await storedStatus(declined)).toBe("declined");
    });

    it("a repeated POST for a declined connection still answers 202 pending with the same id", async () => {
      const address = (await ops.elderCreate()).address;
      const id = await create(tokens.aLive, address);
      await ops.connectionAct("decline", id);
      const again = await post(tokens.aLive, address);
      expect(again.json).toEqual({ id, status: "pending" });
    });

    it("declined -> approved when the caregiver changes their mind, with connection.approved", async () => {
      const id = await create(tokens.aLive, (await ops.elderCreate()).address);
      await ops.connectionAct("decline", id);
      expect(await ops.connectionAct("approve", id)).toEqual({ id, internal_status: "approved" });
      expect(await statusOf(tokens.aLive, id)).toBe("approved");
      await events.waitFor(() => events.of(id).length === 1);
    });

    it("approved -> revoked by the caregiver's sever: reads revoked, emits connection.revoked, and the connection is no longer active", async () => {
      const address = (await ops.elderCreate()).address;
      const id = await create(tokens.aLive, address);
      await ops.connectionAct("approve", id);
      const connections = clientsFor(as(stack.settings, "file-intake")).connection();
      const check = () =>
        connections.checkActiveConnection({ partnerId: partners.a, mode: commonv1.Mode.LIVE, elderAddress: address });
      expect((await check()).active).toBe(true);
      expect(await ops.connectionAct("sever", id)).toEqual({ id, internal_status: "revoked" });
      expect(await statusOf(tokens.aLive, id)).toBe("revoked");
      expect((await check()).active).toBe(false);
      await events.waitFor(() => events.of(id).length === 2);
      expect(events.of(id).map((e) => e.type)).toEqual(["connection.approved", "connection.revoked"]);
    });

    it("a revoked connection requested again reopens under the same id as pending, and must be approved anew", async () => {
      const address = (await ops.elderCreate()).address;
      const id = await create(tokens.aLive, address);
      await ops.connectionAct("approve", id);
      await del(tokens.aLive, id);
      const again = await post(tokens.aLive, address);
      expect(again.json).toEqual({ id, status: "pending" });
      expect(await statusOf(tokens.aLive, id)).toBe("pending");
    });

    it("refused acts fail with one line and change nothing", async () => {
      const pending = await create(tokens.aLive, (await ops.elderCreate()).address);
      const unresolvedId = await create(tokens.aLive, unresolvable());
      const approved = await create(tokens.aLive, (await ops.elderCreate()).address);
      await ops.connectionAct("approve", approved);
      const cases: [string, "approve" | "decline" | "sever", string, Code][] = [
        ["an unknown id", "approve", newId("con"), Status.NOT_FOUND],
        ["a malformed id", "sever", "not-an-id", Status.NOT_FOUND],
        ["sever of a pending connection", "sever", pending, Status.FAILED_PRECONDITION],
        ["decline of an approved connection", "decline", approved, Status.FAILED_PRECONDITION],
        ["approve of an unresolvable address", "approve", unresolvedId, Status.FAILED_PRECONDITION],
      ];
      for (const [, act, id, code] of cases) {
        const err = await rpcError(ops.connectionAct(act, id));
        expect(err.code).toBe(code);
        expect(describeFailure(err, [])).not.toContain("\n");
      }
      expect(await statusOf(tokens.aLive, pending)).toBe("pending");
      expect(await statusOf(tokens.aLive, approved)).toBe("approved");
      expect(await statusOf(tokens.aLive, unresolvedId)).toBe("pending");
    });
  });

  describe("test mode", () => {
    it("a test connection to the sandbox elder approves by itself after SANDBOX_APPROVAL_DELAY_SECONDS, with connection.approved in test mode", async () => {
      const c = await ops.partnerCreate({ name: "Lab C" });
      const token = await accessToken(stack.baseUrl, c.test.client_id, c.test.client_secret);
      const started = Date.now();
      const id = await create(token, sandbox);
      expect(await statusOf(token, id)).toBe("pending");
      await events.waitFor(() => events.of(id).length === 1, 65_000);
      const approvedAfter = Date.now() - started;
      expect(approvedAfter).toBeGreaterThanOrEqual(1000);
      expect(approvedAfter).toBeLessThan(61_000);
      expect(events.of(id)[0]).toMatchObject({
        type: "connection.approved",
        status: "approved",
        mode: commonv1.Mode.TEST,
        partnerId: c.partner_id,
      });
      expect(await statusOf(token, id)).toBe("approved");
    });

    it("test token + real address and live token + sandbox address stay pending and cannot be approved", async () => {
      const real = (await ops.elderCreate()).address;
      const testToReal = await create(tokens.aTest, real);
      const liveToSandbox = await create(tokens.aLive, sandbox);
      const control = await create(tokens.aTest, sandbox);
      await events.waitFor(() => events.of(control).length === 1, 65_000);
      await settle(testToReal, liveToSandbox);
      for (const [token, id] of [
        [tokens.aTest, testToReal],
        [tokens.aLive, liveToSandbox],
      ] as const) {
        expect((await rpcError(ops.connectionAct("approve", id))).code).toBe(Status.FAILED_PRECONDITION);
        expect(await statusOf(token, id)).toBe("pending");
        expect(events.of(id)).toEqual([]);
      }
      const connections = clientsFor(as(stack.settings, "file-intake")).connection();
      expect(
        (
          await connections.checkActiveConnection({
            partnerId: partners.a,
            mode: commonv1.Mode.TEST,
            elderAddress: real,
          })
        ).active,
      ).toBe(false);
      expect(
        (
          await connections.checkActiveConnection({
            partnerId: partners.a,
            mode: commonv1.Mode.LIVE,
            elderAddress: sandbox,
          })
        ).active,
      ).toBe(false);
      expect(
        (
          await connections.checkActiveConnection({
            partnerId: partners.a,
            mode: commonv1.Mode.TEST,
            elderAddress: sandbox,
          })
        ).active,
      ).toBe(true);
    });

    it("no caregiver acts on test connections", async () => {
      const id = await create(tokens.aTest, (await ops.elderCreate()).address);
      for (const act of ["approve", "decline", "sever"] as const) {
        expect((await rpcError(ops.connectionAct(act, id))).code).toBe(Status.FAILED_PRECONDITION);
      }
      expect(await storedStatus(id)).toBe("pending");
    });
  });
});

describe("connections bounds", () => {
  // The per-partner bounds of POST /v1/connections through the gateway (docs/connections.md,
  // "Bounds"): pending connections per partner and mode, connections opened per day, and how often
  // one connection reopens. Past any, 429 rate_limited with Retry-After, the same bytes for an
  // address that resolves and one that does not (guarantee 1). The partner's request rate is lifted
  // so that only these bounds act.

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
    headers: [...r.headers]
      .filter(([name]) => name !== "date")
      .map(([name, value]) => [
        name,
        name === "x-request-id" ? value.replace(/^req_[0-9A-Za-z]{22}$/, "req_ID") : value,
      ]),
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
      expect(Object.fromEntries(statuses)).toEqual({
        202: stack.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER,
        429: total - stack.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER,
      });
      expect(stack.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER).toBe(100);
      expect(refusals.size).toBe(1);
      const [only] = [...refusals].map((s) => JSON.parse(s) as ReturnType<typeof observable>);
      expect(JSON.parse(only!.body)).toEqual({
        error: { type: "rate_limit_error", code: "rate_limited", message: expect.any(String) },
      });
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
            expect((await call(stack.baseUrl, live, "GET", `/v1/connections/${id}`)).json).toEqual({
              id,
              status: "revoked",
            });
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
      const same = (r: Res) => ({
        ...observable(r),
        headers: observable(r).headers.filter(([name]) => name !== "retry-after"),
      });
      expect(same(unknown.refusal!)).toEqual(same(real.refusal!));
      expect(Math.abs(Number(unknown.refusal!.headers.get("retry-after")) - retryAfter)).toBeLessThanOrEqual(60);
      validateResponse("POST", "/v1/connections", real.refusal!.status, real.refusal!.headers, real.refusal!.text);
    });
  });

  describe("per-day bound on connections opened: a POST-DELETE loop on new addresses meets it", () => {
    /** Seconds from `at` to the next midnight UTC. */
    const untilMidnight = (at: number) =>
      Math.ceil((Math.floor(at / 86_400_000) * 86_400_000 + 86_400_000 - at) / 1000);
    const utcDay = (at: number) => new Date(at).toISOString().slice(0, 10);

    /** One test credential opens and deletes new connections until refused; how many it opened and the refusal. */
    async function loop(offset: number) {
      const { test } = await partnerTokens(`Cycling Pharmacy ${offset}`);
      const bound = stack.settings.TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY;
      let opened = 0;
      for (let n = 0; n <= bound; n++) {
        const r = await post(test, unresolvable(offset + n));
        if (r.status === 429) return { test, opened, refusal: r };
        expect(r.status).toBe(202);
        opened++;
        // Deleted at once: the pending bound (100 test connections at once) never acts.
        expect((await del(test, r.json!.id as string)).status).toBe(200);
      }
      return { test, opened, refusal: undefined };
    }

    it("per-day bound on connections opened: one test credential opens 100 a day, however many it deletes; the 429s for a real (sandbox) and an unknown address are identical and carry Retry-After until midnight UTC (guarantee 1)", async () => {
      // The stack keeps the shipped defaults: 100 a day and 100 pending at once for a test credential.
      expect(stack.settings.TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY).toBe(100);
      let started = Date.now();
      let run = await loop(400_000);
      // A loop that crossed midnight UTC counted on two days: once more, on the new one.
      if (utcDay(started) !== utcDay(Date.now())) {
        started = Date.now();
        run = await loop(500_000);
      }
      expect(run.opened).toBe(stack.settings.TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY);
      expect(run.refusal!.status).toBe(429);
      expect(JSON.parse(run.refusal!.text)).toEqual({
        error: { type: "rate_limit_error", code: "rate_limited", message: expect.any(String) },
      });
      const retryAfter = Number(run.refusal!.headers.get("retry-after"));
      expect(retryAfter).toBeLessThanOrEqual(untilMidnight(started));
      expect(retryAfter).toBeGreaterThanOrEqual(untilMidnight(Date.now()));
      validateResponse("POST", "/v1/connections", run.refusal!.status, run.refusal!.headers, run.refusal!.text);

      // The sandbox elder (the one address a test credential resolves) and an unknown address: the
      // same status, headers and body bytes. Retry-After counts seconds, so a pair that straddles a
      // second's tick is asked again.
      let pair: [Res, Res] = [run.refusal!, run.refusal!];
      for (let attempt = 0; attempt < 5; attempt++) {
        pair = [await post(run.test, sandbox), await post(run.test, unresolvable(600_000 + attempt))];
        if (pair[0].headers.get("retry-after") === pair[1].headers.get("retry-after")) break;
      }
      const [real, unknown] = pair;
      expect(real.status).toBe(429);
      expect(observable(real)).toEqual(observable(unknown));
      expect(unknown.text).toBe(run.refusal!.text);

      // A refusal stores nothing: asked again, the same addresses are refused again (a connection
      // that existed would be answered 202 as it is).
      expect((await post(run.test, sandbox)).status).toBe(429);
      expect((await post(run.test, unresolvable(600_000))).status).toBe(429);
    });
  });
});

describe("connections expiry", () => {
  // Pending windows of 2 s and a sandbox delay of 4 s: expiry, computed on read and persisted by the
  // sweep, and a sandbox connection that outlives the window because it waits for its approval.

  const ttlSeconds = 2;
  const delaySeconds = 4;
  let stack: TestStack;
  let events: EventCollector;
  let mongo: MongoClient;
  let ops: ReturnType<typeof opsFor>;
  let live: string;
  let test: string;
  let sandbox: string;

  const post = (token: string, elder: string) => call(stack.baseUrl, token, "POST", "/v1/connections", { elder });
  const create = async (token: string, elder: string) => (await post(token, elder)).json!.id as string;
  const get = (token: string, id: string) => call(stack.baseUrl, token, "GET", `/v1/connections/${id}`);
  const statusOf = async (token: string, id: string) => (await get(token, id)).json!.status;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const stored = (id: string) =>
    mongo
      .db(databaseName(stack.settings.DATA_NAMESPACE, "connection"))
      .collection("connections")
      .findOne({ _id: id as never });
  async function eventually<T>(read: () => Promise<T>, want: T, timeoutMs = 15_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await read();
      if (value === want || Date.now() > deadline) return value;
      await sleep(200);
    }
  }

  beforeAll(async () => {
    stack = await startTestStack({
      CONNECTION_PENDING_TTL_SECONDS: String(ttlSeconds),
      SANDBOX_APPROVAL_DELAY_SECONDS: String(delaySeconds),
    });
    events = await collectConnectionEvents(stack.settings.KAFKA_BROKERS, stack.settings.DATA_NAMESPACE);
    mongo = await MongoClient.connect(stack.settings.MONGODB_URI);
    ops = opsFor(stack.settings);
    sandbox = (await ops.info()).sandbox_elder_address;
    const partner = await ops.partnerCreate({ name: "Pharmacy" });
    live = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    test = await accessToken(stack.baseUrl, partner.test.client_id, partner.test.client_secret);
  });

  afterAll(async () => {
    await events?.stop();
    await mongo?.close();
    await stack?.stop();
  });

  describe("expiry (CONNECTION_PENDING_TTL_SECONDS=2)", () => {
    it("pending, declined and unresolvable connections read expired after the window, persisted by the sweep, without an event; the sandbox connection waits and approves", async () => {
      const pending = await create(live, (await ops.elderCreate()).address);
      const declined = await create(live, (await ops.elderCreate()).address);
      await ops.connectionAct("decline", declined);
      const unresolvable = await create(live, `never.registered.anywhere@${stack.settings.ADDRESS_DOMAIN}`);
      const all = [pending, declined, unresolvable];
      const requested = Date.now();
      const waiting = await create(test, sandbox);
      // The windows of the three started no later than `requested`.
      for (const id of all) expect(["pending", "expired"]).toContain(await statusOf(live, id));
      expect(await statusOf(test, waiting)).toBe("pending");

      await sleep(requested + ttlSeconds * 1000 + 300 - Date.now());
      // Guarantee 4 over time: the declined one expires exactly like the undecided one.
      const [a, b] = [await get(live, pending), await get(live, declined)];
      expect(a.json!.status).toBe("expired");
      expect(b.text.replace(declined, "")).toBe(a.text.replace(pending, ""));
      expect(await statusOf(live, unresolvable)).toBe("expired");
      // Not expired, whatever the window says: it waits for its approval.
      expect(await statusOf(test, waiting)).toBe("pending");

      for (const id of all) expect(await eventually(async () => (await stored(id))?.status, "expired")).toBe("expired");

      expect(await eventually(() => statusOf(test, waiting), "approved")).toBe("approved");
      const approvedAfter = Date.now() - requested;
      expect(approvedAfter).toBeGreaterThanOrEqual(delaySeconds * 1000);
      expect(approvedAfter).toBeLessThan((delaySeconds + 60) * 1000);
      await events.waitFor(() => events.of(waiting).length === 1);
      for (const id of all) expect(events.of(id)).toEqual([]);
    });

    it("an expired connection cannot be approved; a new request reopens it under the same id; DELETE reports revoked", async () => {
      const address = (await ops.elderCreate()).address;
      const id = await create(live, address);
      await sleep(ttlSeconds * 1000 + 300);
      expect(await statusOf(live, id)).toBe("expired");
      await expect(ops.connectionAct("approve", id)).rejects.toThrow(/expired/);

      const again = await post(live, address);
      expect(again.status).toBe(202);
      expect(again.json).toEqual({ id, status: "pending" });
      expect(await ops.connectionAct("approve", id)).toEqual({ id, internal_status: "approved" });
      expect(await statusOf(live, id)).toBe("approved");

      const other = await create(live, (await ops.elderCreate()).address);
      await sleep(ttlSeconds * 1000 + 300);
      const deleted = await call(stack.baseUrl, live, "DELETE", `/v1/connections/${other}`);
      expect(deleted.json).toEqual({ id: other, status: "revoked" });
      expect(await statusOf(live, other)).toBe("revoked");
      await settled(
        events,
        mongo.db(databaseName(stack.settings.DATA_NAMESPACE, "connection")).collection("connections"),
        other,
      );
      expect(events.of(other)).toEqual([]);
    });
  });
});
