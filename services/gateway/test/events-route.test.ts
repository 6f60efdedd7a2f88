import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { ErrorReason, serviceError } from "@pi/common/rpc/errors";
import { commonv1, type webhookv1 } from "@pi/proto";
import { PartnerError } from "../src/errors.js";
import { EVENTS_LIMIT_DEFAULT, eventsListJson, parseEventsQuery, STARTING_AFTER_MESSAGE } from "../src/events-query.js";
import { startEdge, type Edge } from "./edge-harness.js";

// GET /v1/events at the edge: the query's rules (pure), and the route with a stand-in webhook
// service: the scope, the partner and mode taken from the token alone, the exact bodies passed through.

function refusal(fn: () => unknown): { code: string; param?: string; message: string } {
  try {
    fn();
  } catch (err) {
    if (err instanceof PartnerError) return { code: err.code, param: err.detail.param, message: err.message };
    throw err;
  }
  throw new Error("expected a PartnerError");
}

const EVT = "evt_3kQ9tTg1YwZc8xXb0aL7Rm";

describe("the events list's query", () => {
  it("defaults to the newest 10 of every type", () => {
    expect(parseEventsQuery({})).toEqual({ limit: EVENTS_LIMIT_DEFAULT, startingAfter: "", type: "" });
    expect(EVENTS_LIMIT_DEFAULT).toBe(10);
  });

  it("takes limit 1 to 100, starting_after an evt_ id, type one of the two event types", () => {
    expect(parseEventsQuery({ limit: "1" })).toEqual({ limit: 1, startingAfter: "", type: "" });
    expect(parseEventsQuery({ limit: "100", starting_after: EVT, type: "connection.revoked" })).toEqual({
      limit: 100,
      startingAfter: EVT,
      type: "connection.revoked",
    });
    expect(parseEventsQuery({ type: "connection.approved" })).toEqual({
      limit: 10,
      startingAfter: "",
      type: "connection.approved",
    });
  });

  it.each([
    ["limit 0", { limit: "0" }, "limit"],
    ["limit 101", { limit: "101" }, "limit"],
    ["a negative limit", { limit: "-1" }, "limit"],
    ["a fractional limit", { limit: "2.5" }, "limit"],
    ["an empty limit", { limit: "" }, "limit"],
    ["a limit with spaces", { limit: " 5" }, "limit"],
    ["limit in exponent form", { limit: "1e2" }, "limit"],
    ["a huge limit", { limit: "9".repeat(400) }, "limit"],
    ["limit given twice", { limit: ["5", "6"] }, "limit"],
    ["a decline type", { type: "connection.declined" }, "type"],
    ["an expiry type", { type: "connection.expired" }, "type"],
    ["a type in another case", { type: "Connection.Approved" }, "type"],
    ["an empty type", { type: "" }, "type"],
    ["type given twice", { type: ["connection.approved", "connection.revoked"] }, "type"],
    ["an unknown parameter", { startingAfter: EVT }, "startingAfter"],
    ["ending_before (not offered)", { ending_before: EVT }, "ending_before"],
  ])("refuses %s: 400 invalid_request naming the parameter", (_name, query, param) => {
    expect(refusal(() => parseEventsQuery(query))).toMatchObject({ code: "invalid_request", param });
  });

  it.each([
    ["a con_ id", "con_3kT9xQ2mVb7LpR4sN8wZcY"],
    ["an empty one", ""],
    ["a bare prefix", "evt_"],
    ["a longer than any id", `evt_${"a".repeat(65)}`],
    ["punctuation", "evt_abc$"],
  ])("answers a malformed starting_after (%s) as it answers an unknown one", (_name, value) => {
    expect(refusal(() => parseEventsQuery({ starting_after: value }))).toEqual({
      code: "invalid_request",
      param: "starting_after",
      message: STARTING_AFTER_MESSAGE,
    });
  });

  it("builds the list object from the stored bodies, byte for byte", () => {
    const bodies = [
      '{"id":"evt_b","type":"connection.revoked","created":2,"data":{"connection_id":"con_a","status":"revoked"}}',
      '{"id":"evt_a"}',
    ];
    const json = eventsListJson(bodies, true);
    expect(json).toBe(`{"data":[${bodies[0]},${bodies[1]}],"has_more":true}`);
    expect(JSON.parse(json)).toEqual({ data: bodies.map((b) => JSON.parse(b)), has_more: true });
    expect(eventsListJson([], false)).toBe('{"data":[],"has_more":false}');
  });
});

describe("GET /v1/events at the edge", () => {
  let edge: Edge;
  const calls: webhookv1.ListEventsRequest[] = [];
  const body = (id: string) =>
    `{"id":"${id}","type":"connection.approved","created":1767225600,"data":{"connection_id":"con_3kT9xQ2mVb7LpR4sN8wZcY","status":"approved"}}`;

  beforeAll(async () => {
    edge = await startEdge({
      webhooks: {
        listEvents(req) {
          calls.push(req);
          if (req.startingAfter === "evt_unknown")
            throw serviceError(ErrorReason.INVALID_REQUEST, STARTING_AFTER_MESSAGE, "starting_after");
          return { events: [body("evt_2"), body("evt_1")], hasMore: req.limit === 2 };
        },
      },
    });
  });
  afterAll(() => edge?.stop());

  it("asks for the token's partner and mode, and answers the stored bodies as the list object", async () => {
    const res = await edge.send("GET", "/v1/events?limit=2&type=connection.approved", {
      headers: { authorization: `Bearer ${await edge.token("ptr_a", "connections:write", "test")}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.text).toBe(`{"data":[${body("evt_2")},${body("evt_1")}],"has_more":true}`);
    expect(calls.at(-1)).toMatchObject({
      partnerId: "ptr_a",
      mode: commonv1.Mode.TEST,
      limit: 2,
      startingAfter: "",
      type: "connection.approved",
    });
    await edge.send("GET", "/v1/events", {
      headers: { authorization: `Bearer ${await edge.token("ptr_b", "connections:write", "live")}` },
    });
    expect(calls.at(-1)).toMatchObject({
      partnerId: "ptr_b",
      mode: commonv1.Mode.LIVE,
      limit: 10,
      startingAfter: "",
      type: "",
    });
  });

  it("the connections:write scope is required: a files:write token gets 403 insufficient_scope and nothing is asked", async () => {
    const before = calls.length;
    const res = await edge.send("GET", "/v1/events", {
      headers: { authorization: `Bearer ${await edge.token("ptr_a", "files:write")}` },
    });
    expect([res.status, res.json.error.code]).toEqual([403, "insufficient_scope"]);
    expect(calls.length).toBe(before);
  });

  it("no bearer is the one 401", async () => {
    const res = await edge.send("GET", "/v1/events");
    expect([res.status, res.json.error.code]).toEqual([401, "unauthorized"]);
  });

  it("a bad query is a 400 before any call; an unknown starting_after is the same 400 as a malformed one", async () => {
    const auth = { authorization: `Bearer ${await edge.token("ptr_a")}` };
    const before = calls.length;
    const bad = await edge.send("GET", "/v1/events?type=connection.expired", { headers: auth });
    expect([bad.status, bad.json.error]).toEqual([
      400,
      expect.objectContaining({ type: "invalid_request_error", code: "invalid_request", param: "type" }),
    ]);
    const malformed = await edge.send("GET", "/v1/events?starting_after=nope", { headers: auth });
    expect(calls.length).toBe(before);
    const unknown = await edge.send("GET", "/v1/events?starting_after=evt_unknown", { headers: auth });
    expect(unknown.status).toBe(400);
    expect(unknown.text).toBe(malformed.text);
    expect(unknown.json.error).toEqual({
      type: "invalid_request_error",
      code: "invalid_request",
      message: STARTING_AFTER_MESSAGE,
      param: "starting_after",
    });
  });

  it("other methods on /v1/events are the 405 with Allow", async () => {
    const res = await edge.send("POST", "/v1/events", {
      headers: { authorization: `Bearer ${await edge.token("ptr_a")}` },
    });
    expect([res.status, res.json.error.code]).toEqual([405, "method_not_allowed"]);
    expect(res.headers.allow).toContain("GET");
  });
});

describe("GET /v1/events during an outage", () => {
  it("the webhook service down: 503 service_unavailable with Retry-After, no internal detail", async () => {
    const edge = await startEdge({
      webhooks: {
        listEvents() {
          throw new RpcError("connect ECONNREFUSED 127.0.0.1:50054 (pi.webhook.v1.WebhookService)", Status.UNAVAILABLE);
        },
      },
    });
    try {
      const res = await edge.send("GET", "/v1/events", {
        headers: { authorization: `Bearer ${await edge.token("ptr_outage")}` },
      });
      expect([res.status, res.json.error.code, res.headers["retry-after"]]).toEqual([503, "service_unavailable", "1"]);
      expect(res.text).not.toMatch(/127\.0\.0\.1|ECONNREFUSED|webhook\.v1/);
    } finally {
      await edge.stop();
    }
  });
});
