import { afterAll, beforeAll, beforeEach, describe, expect, it } from "@jest/globals";
import { connectionv1 } from "@pi/proto";
import { startEdge, type Edge } from "./edge-harness.js";

// The connection routes at the edge: a request body the gateway refuses by itself, and the bearer
// and scope every route needs, answered before the connection service is asked. What needs the
// service (the no-oracle guarantees, ids, transitions) is in test/e2e/connections.test.ts.

const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";

let edge: Edge;
let token: string;
let filesOnly: string;
/** Calls that reached the connection service. */
let reached: string[] = [];

beforeAll(async () => {
  const pending = { connection: { id: CON, status: connectionv1.ExternalStatus.PENDING } };
  edge = await startEdge({
    connections: {
      requestConnection: () => {
        reached.push("request");
        return pending;
      },
      getConnection: () => {
        reached.push("get");
        return pending;
      },
      revokeConnection: () => {
        reached.push("revoke");
        return { connection: { id: CON, status: connectionv1.ExternalStatus.REVOKED } };
      },
    },
  });
  token = await edge.token("ptr_connections");
  filesOnly = await edge.token("ptr_connections", "files:write");
});
afterAll(() => edge.stop());
beforeEach(() => {
  reached = [];
});

const domain = () => edge.settings.ADDRESS_DOMAIN;
const post = (authorization: string, body: unknown) =>
  edge.send("POST", "/v1/connections", {
    headers: { authorization, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

describe("POST /v1/connections bodies refused at the edge", () => {
  it("the control: a well-formed address reaches the connection service and is 202", async () => {
    expect((await post(`Bearer ${token}`, { elder: `apple.pear.plum@${domain()}` })).status).toBe(202);
    expect(reached).toEqual(["request"]);
  });

  it.each([
    ["a missing elder", () => ({})],
    ["an extra property", () => ({ elder: `apple.pear.plum@${domain()}`, extra: 1 })],
    ["a number", () => ({ elder: 42 })],
    ["two words", () => ({ elder: `apple.pear@${domain()}` })],
    ["four words", () => ({ elder: `apple.pear.plum.fig@${domain()}` })],
    ["another domain", () => ({ elder: "apple.pear.plum@example.org" })],
    ["a digit in a word", () => ({ elder: `apple.pe4r.plum@${domain()}` })],
    ["one-letter words", () => ({ elder: `a.b.c@${domain()}` })],
    [
      "over 255 characters",
      () => ({ elder: `${"a".repeat(32)}.${"b".repeat(32)}.${"c".repeat(32)}@${"d".repeat(170)}.example` }),
    ],
  ])("400 invalid_request for %s", async (_, body) => {
    const res = await post(`Bearer ${token}`, body());
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("invalid_request");
    expect(reached).toEqual([]);
  });
});

describe("the connection routes' bearer and scope", () => {
  it("all three routes require connections:write and a bearer", async () => {
    const auth = { authorization: `Bearer ${filesOnly}` };
    for (const res of [
      await edge.send("GET", `/v1/connections/${CON}`, { headers: auth }),
      await edge.send("DELETE", `/v1/connections/${CON}`, { headers: auth }),
      await post(`Bearer ${filesOnly}`, { elder: `apple.pear.plum@${domain()}` }),
    ]) {
      expect(res.status).toBe(403);
      expect(res.json.error.code).toBe("insufficient_scope");
    }
    expect((await edge.send("GET", `/v1/connections/${CON}`)).status).toBe(401);
    expect(reached).toEqual([]);
  });
});
