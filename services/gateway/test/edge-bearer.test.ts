import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { connectionv1 } from "@pi/proto";
import { startEdge, type Answer, type Edge } from "./edge-harness.js";

// Authentication, item 5, at the edge: a missing, malformed or invalid bearer gives 401 with code
// unauthorized, the one body and the same headers whatever the cause, before the route, the method
// or the body is looked at, and no internal service is asked. The causes that need the deployment's
// own signing key, a revocation or a suspension are in test/e2e/auth.test.ts.

const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
const ELDER = "amber.falcon.river@elders.example";

let edge: Edge;
let token: string;
/** Calls that reached the connection service. */
let reached = 0;

beforeAll(async () => {
  edge = await startEdge({
    connections: {
      requestConnection: () => {
        reached++;
        return { connection: { id: CON, status: connectionv1.ExternalStatus.PENDING } };
      },
      getConnection: () => {
        reached++;
        return { connection: { id: CON, status: connectionv1.ExternalStatus.PENDING } };
      },
    },
  });
  token = await edge.token("ptr_bearer");
});
afterAll(() => edge.stop());

function send(
  authorization: string | undefined,
  method = "POST",
  path = "/v1/connections",
  body: unknown = { elder: ELDER },
) {
  return edge.send(method, path, {
    headers: {
      ...(authorization !== undefined ? { authorization } : {}),
      ...(body !== null ? { "content-type": "application/json" } : {}),
    },
    ...(body !== null ? { body: JSON.stringify(body) } : {}),
  });
}

const UNAUTHORIZED = {
  error: {
    type: "authentication_error",
    code: "unauthorized",
    message: "The bearer token is missing, malformed, invalid, expired or revoked.",
  },
};

/** The 401, and the same status, body and headers (but the request id and date) as the reference. */
function expectUnauthorized(res: Answer, reference?: Answer) {
  expect(res.status).toBe(401);
  expect(res.json).toEqual(UNAUTHORIZED);
  expect(res.headers["www-authenticate"]).toBe('Bearer realm="partner-api"');
  if (reference) {
    const comparable = (a: Answer) => {
      const { date: _date, "x-request-id": _id, ...headers } = a.headers;
      return { status: a.status, text: a.text, headers };
    };
    expect(comparable(res)).toEqual(comparable(reference));
  }
}

describe("401 unauthorized at the edge: every cause gives the identical body and headers", () => {
  let reference: Answer;
  beforeAll(async () => {
    reference = await send(undefined);
  });

  it("the valid token itself is accepted (the control), the scheme in any case (RFC 6750)", async () => {
    const before = reached;
    expect((await send(`Bearer ${token}`)).status).toBe(202);
    expect((await send(`bearer ${token}`)).status).toBe(202);
    expect(reached).toBe(before + 2);
  });

  it("401 cause: missing Authorization header", () => {
    expectUnauthorized(reference);
  });

  it.each([
    ["another scheme", () => `Basic ${Buffer.from("a:b").toString("base64")}`],
    ["the scheme alone", () => "Bearer"],
    ["the scheme and a space", () => "Bearer "],
    ["no scheme", () => token],
    ["two tokens", () => `Bearer ${token} ${token}`],
    ["characters outside b64token", () => `Bearer ${token}!`],
    ["an empty header", () => ""],
  ])("401 cause: malformed Authorization header (%s)", async (_what, header) => {
    const before = reached;
    expectUnauthorized(await send(header()), reference);
    expect(reached).toBe(before);
  });

  it.each([
    ["not a JWT", () => "Bearer abc.def"],
    ["three garbage parts", () => "Bearer aaaa.bbbb.cccc"],
    [
      "a tampered payload",
      () => {
        const [h, p, sig] = token.split(".");
        const claims = JSON.parse(Buffer.from(p!, "base64url").toString()) as Record<string, unknown>;
        return `Bearer ${h}.${Buffer.from(JSON.stringify({ ...claims, scope: "connections:write files:write admin" })).toString("base64url")}.${sig}`;
      },
    ],
    [
      "a flipped signature byte",
      () => {
        const [h, p, sig] = token.split(".");
        const bytes = Buffer.from(sig!, "base64url");
        bytes[5] ^= 0xff;
        return `Bearer ${h}.${p}.${bytes.toString("base64url")}`;
      },
    ],
    [
      "alg none",
      () => {
        const [, p] = token.split(".");
        return `Bearer ${Buffer.from(JSON.stringify({ alg: "none", typ: "at+jwt" })).toString("base64url")}.${p}.`;
      },
    ],
  ])("401 cause: invalid token (%s)", async (_what, header) => {
    const before = reached;
    expectUnauthorized(await send(header()), reference);
    expect(reached).toBe(before);
  });

  it("a bad bearer is 401 before anything else: an unknown /v1 path, a wrong method, a bad body", async () => {
    expectUnauthorized(await send("Bearer nope", "GET", "/v1/nothing-here", null), reference);
    expectUnauthorized(await send("Bearer nope", "PUT", "/v1/connections", null), reference);
    expectUnauthorized(await send("Bearer nope", "POST", "/v1/connections", { wrong: true }), reference);
  });
});
