import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Code, ConnectError } from "@connectrpc/connect";
import { MongoClient } from "mongodb";
import { clientsFor, databaseName, newId } from "@pi/common";
import { commonv1 } from "@pi/proto";
import { describeFailure } from "../../services/ops/src/commands.js";
import { as, startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { collectConnectionEvents, settled, type EventCollector } from "../support/connection-events.js";

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
    .map(([name, value]) => [name, name === "x-request-id" ? value.replace(/^req_[0-9A-Za-z]{22}$/, "req_ID") : value]),
  body: r.text,
});
/** Same, with the connection id masked (two different connections never share an id). */
const observableMasked = (r: Res) => {
  const o = observable(r);
  return { ...o, body: o.body.replace(r.json!.id as string, "con_ID") };
};
const unresolvable = () => `${newId("req").slice(4, 14).replace(/[^a-z]/gi, "x").toLowerCase()}.never.registered@${domain}`;
const rpcError = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (err) {
    return err as ConnectError;
  }
  throw new Error("expected the call to fail");
};
const connectionsCollection = () => mongo.db(databaseName(stack.settings.DATA_NAMESPACE, "connection")).collection("connections");
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
    expect(observableMasked(await post(tokens.aTest, real))).toEqual(observableMasked(await post(tokens.aTest, sandbox)));
  });

  it("guarantee 1 with a live token: the sandbox address (unresolvable to it) answers like a real one", async () => {
    const real = (await ops.elderCreate()).address;
    expect(observableMasked(await post(tokens.aLive, sandbox))).toEqual(observableMasked(await post(tokens.aLive, real)));
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

  it.each([
    ["a missing elder", () => ({})],
    ["an extra property", () => ({ elder: `apple.pear.plum@${domain}`, extra: 1 })],
    ["a number", () => ({ elder: 42 })],
    ["two words", () => ({ elder: `apple.pear@${domain}` })],
    ["four words", () => ({ elder: `apple.pear.plum.fig@${domain}` })],
    ["another domain", () => ({ elder: "apple.pear.plum@example.org" })],
    ["a digit in a word", () => ({ elder: `apple.pe4r.plum@${domain}` })],
    ["one-letter words", () => ({ elder: `a.b.c@${domain}` })],
    ["over 255 characters", () => ({ elder: `${"a".repeat(32)}.${"b".repeat(32)}.${"c".repeat(32)}@${"d".repeat(170)}.example` })],
  ])("400 invalid_request for %s", async (_, body) => {
    const res = await call(stack.baseUrl, tokens.aLive, "POST", "/v1/connections", body());
    expect(res.status).toBe(400);
    expect((res.json!.error as { code: string }).code).toBe("invalid_request");
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
      expect(reference.json).toEqual({ error: { type: "invalid_request_error", code: "not_found", message: expect.any(String) } });
      for (const id of ids) expect(observable(await method(tokens.aLive, id))).toEqual(observable(reference));
      expect(observable(await method(tokens.aTest, otherMode))).toEqual(observable(reference));
    }
    expect(await statusOf(tokens.bLive, foreign)).toBe("pending");
    expect(await statusOf(tokens.aLive, otherMode)).toBe("pending");
  });

  it("all three routes require connections:write and a bearer", async () => {
    const id = await create(tokens.aLive, (await ops.elderCreate()).address);
    for (const res of [await get(tokens.aFilesOnly, id), await del(tokens.aFilesOnly, id), await post(tokens.aFilesOnly, sandbox)]) {
      expect(res.status).toBe(403);
      expect((res.json!.error as { code: string }).code).toBe("insufficient_scope");
    }
    const anonymous = await call(stack.baseUrl, undefined, "GET", `/v1/connections/${id}`);
    expect(anonymous.status).toBe(401);
    expect(await statusOf(tokens.aLive, id)).toBe("pending");
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
    expect(published!.event).toMatchObject({ type: "connection.approved", status: "approved", partnerId: partners.a, mode: commonv1.Mode.LIVE });
    expect(published!.event.eventId).toMatch(/^evt_/);
    await settle(id);
    expect(events.of(id)).toHaveLength(1);
  });

  it("guarantee 4: a declined connection reads pending, byte for byte like an undecided one, and emits nothing", async () => {
    const declined = await create(tokens.aLive, (await ops.elderCreate()).address);
    const undecided = await create(tokens.aLive, (await ops.elderCreate()).address);
    expect(await ops.connectionAct("decline", declined)).toEqual({ id: declined, internal_status: "declined" });
    expect(observableMasked(await get(tokens.aLive, declined))).toEqual(observableMasked(await get(tokens.aLive, undecided)));
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
    const check = () => connections.checkActiveConnection({ partnerId: partners.a, mode: commonv1.Mode.LIVE, elderAddress: address });
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
      ["an unknown id", "approve", newId("con"), Code.NotFound],
      ["a malformed id", "sever", "not-an-id", Code.NotFound],
      ["sever of a pending connection", "sever", pending, Code.FailedPrecondition],
      ["decline of an approved connection", "decline", approved, Code.FailedPrecondition],
      ["approve of an unresolvable address", "approve", unresolvedId, Code.FailedPrecondition],
    ];
    for (const [, act, id, code] of cases) {
      const err = await rpcError(ops.connectionAct(act, id));
      expect(err.code).toBe(code);
      expect(describeFailure(err, {})).not.toContain("\n");
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
    expect(events.of(id)[0]).toMatchObject({ type: "connection.approved", status: "approved", mode: commonv1.Mode.TEST, partnerId: c.partner_id });
    expect(await statusOf(token, id)).toBe("approved");
  });

  it("test token + real address and live token + sandbox address stay pending and cannot be approved", async () => {
    const real = (await ops.elderCreate()).address;
    const testToReal = await create(tokens.aTest, real);
    const liveToSandbox = await create(tokens.aLive, sandbox);
    const control = await create(tokens.aTest, sandbox);
    await events.waitFor(() => events.of(control).length === 1, 65_000);
    await settle(testToReal, liveToSandbox);
    for (const [token, id] of [[tokens.aTest, testToReal], [tokens.aLive, liveToSandbox]] as const) {
      expect((await rpcError(ops.connectionAct("approve", id))).code).toBe(Code.FailedPrecondition);
      expect(await statusOf(token, id)).toBe("pending");
      expect(events.of(id)).toEqual([]);
    }
    const connections = clientsFor(as(stack.settings, "file-intake")).connection();
    expect((await connections.checkActiveConnection({ partnerId: partners.a, mode: commonv1.Mode.TEST, elderAddress: real })).active).toBe(false);
    expect((await connections.checkActiveConnection({ partnerId: partners.a, mode: commonv1.Mode.LIVE, elderAddress: sandbox })).active).toBe(false);
    expect((await connections.checkActiveConnection({ partnerId: partners.a, mode: commonv1.Mode.TEST, elderAddress: sandbox })).active).toBe(true);
  });

  it("no caregiver acts on test connections", async () => {
    const id = await create(tokens.aTest, (await ops.elderCreate()).address);
    for (const act of ["approve", "decline", "sever"] as const) {
      expect((await rpcError(ops.connectionAct(act, id))).code).toBe(Code.FailedPrecondition);
    }
    expect(await storedStatus(id)).toBe("pending");
  });
});
