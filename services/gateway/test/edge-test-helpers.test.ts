import { afterAll, beforeAll, beforeEach, describe, expect, it } from "@jest/globals";
import { commonv1, connectionv1 } from "@pi/proto";
import { startEdge, type Answer, type Edge } from "./edge-harness.js";

// The test helpers at the edge (docs/edge.md, "Test helpers"): which tokens reach them, what the
// others get, and which act each path asks the connection service for. What needs the service (the
// transitions, webhooks, ownership) is in test/e2e/test-helpers.test.ts.

const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
const ACTS = ["approve", "decline", "sever", "expire"] as const;

let edge: Edge;
const tokens = {} as Record<"test" | "live" | "testFilesOnly" | "liveFilesOnly", string>;
/** What reached the connection service. */
let reached: connectionv1.ActOnTestConnectionRequest[] = [];

beforeAll(async () => {
  edge = await startEdge({
    connections: {
      actOnTestConnection: (req) => {
        reached.push(req);
        return { connection: { id: req.id, status: connectionv1.ExternalStatus.APPROVED } };
      },
    },
  });
  tokens.test = await edge.token("ptr_helpers", "connections:write files:write", "test");
  tokens.live = await edge.token("ptr_helpers", "connections:write files:write", "live");
  tokens.testFilesOnly = await edge.token("ptr_helpers", "files:write", "test");
  tokens.liveFilesOnly = await edge.token("ptr_helpers", "files:write", "live");
});
afterAll(() => edge.stop());
beforeEach(() => {
  reached = [];
});

const send = (method: string, path: string, token?: string) =>
  edge.send(method, path, token ? { headers: { authorization: `Bearer ${token}` } } : {});
/** What a partner may compare: status, headers but the volatile ones, body bytes. */
const bytes = (a: Answer) => {
  const { date, "x-request-id": _id, ...headers } = a.headers;
  return { status: a.status, headers, text: a.text };
};

describe("test helpers at the edge", () => {
  it.each(ACTS)(
    "POST %s with a test token asks the connection service for that act on the partner's own test connection",
    async (act) => {
      const res = await send("POST", `/v1/test_helpers/connections/${CON}/${act}`, tokens.test);
      expect([res.status, res.json]).toEqual([200, { id: CON, status: "approved" }]);
      expect(reached).toHaveLength(1);
      expect(reached[0]).toMatchObject({
        partnerId: "ptr_helpers",
        id: CON,
        mode: commonv1.Mode.TEST,
        act: connectionv1.TestHelperAct[act.toUpperCase() as "APPROVE"],
      });
    },
  );

  it("a live token gets the 404 of a path no route has, byte for byte, whatever the method, scope or id; nothing is asked", async () => {
    const unknownRoute = bytes(await send("POST", "/v1/no_such_route", tokens.live));
    expect(unknownRoute.status).toBe(404);
    expect(JSON.parse(unknownRoute.text)).toEqual({
      error: { type: "invalid_request_error", code: "not_found", message: "No such resource." },
    });
    for (const act of ACTS) {
      for (const token of [tokens.live, tokens.liveFilesOnly]) {
        for (const [method, id] of [
          ["POST", CON],
          ["GET", CON],
          ["DELETE", CON],
          ["POST", "nope"],
        ] as const) {
          expect([
            method,
            id,
            act,
            bytes(await send(method, `/v1/test_helpers/connections/${id}/${act}`, token)),
          ]).toEqual([method, id, act, unknownRoute]);
        }
      }
    }
    expect(bytes(await send("POST", "/v1/test_helpers/connections", tokens.live))).toEqual(unknownRoute);
    expect(reached).toEqual([]);
  });

  it("a test token with a malformed id gets the same 404, without asking the service", async () => {
    const unknownRoute = bytes(await send("POST", "/v1/no_such_route", tokens.test));
    for (const id of ["nope", "con_", `con_${"a".repeat(65)}`, "con_a%00b", "file_3kT9xQ2mVb7LpR4sN8wZcY"]) {
      expect([id, bytes(await send("POST", `/v1/test_helpers/connections/${id}/approve`, tokens.test))]).toEqual([
        id,
        unknownRoute,
      ]);
    }
    expect(bytes(await send("POST", `/v1/test_helpers/connections/${CON}/reject`, tokens.test))).toEqual(unknownRoute);
    expect(reached).toEqual([]);
  });

  it("a test token without connections:write gets 403 insufficient_scope; no bearer gets 401; another method 405 with Allow: POST", async () => {
    const noScope = await send("POST", `/v1/test_helpers/connections/${CON}/approve`, tokens.testFilesOnly);
    expect([noScope.status, noScope.json.error.code]).toEqual([403, "insufficient_scope"]);
    const noBearer = await send("POST", `/v1/test_helpers/connections/${CON}/approve`);
    expect([noBearer.status, noBearer.json.error.code]).toEqual([401, "unauthorized"]);
    const get = await send("GET", `/v1/test_helpers/connections/${CON}/approve`, tokens.test);
    expect([get.status, get.json.error.code, get.headers.allow]).toEqual([405, "method_not_allowed", "POST"]);
    expect(reached).toEqual([]);
  });
});
