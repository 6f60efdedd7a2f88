import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Writable } from "node:stream";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import Koa from "koa";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { connectionv1, fileintakev1 } from "@pi/proto";
import { createLogger } from "@pi/common/runtime/logger";
import { PARTNER_ERRORS, partnerErrorFromInternal } from "../src/errors.js";
import { handleErrors } from "../src/middleware.js";
import { startEdge, type Answer, type Edge } from "./edge-harness.js";

// Every /v1 error, whatever raised it, leaves the gateway as the envelope with the spec's status
// and code; internal details never reach a partner.

const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
const FILE = "file_9fH2kL5nQ8rT1vX4zB7cD3";
// What an internal failure might say: none of it may reach a partner.
const LEAKY =
  "MongoServerError: E11000 duplicate key error collection: pi_connection.connections index: _id_ at mongodb-0.internal:27017";

let failure: "none" | "unavailable" | "deadline" | "internal" = "none";
const fail = () => {
  if (failure === "unavailable")
    throw new RpcError("connect ECONNREFUSED 10.0.3.7:50052 (connection service)", Status.UNAVAILABLE);
  if (failure === "deadline")
    throw new RpcError("deadline exceeded calling connection.v1.ConnectionService", Status.DEADLINE_EXCEEDED);
  if (failure === "internal") throw new Error(LEAKY);
};

let edge: Edge;
let token: string;

beforeAll(async () => {
  edge = await startEdge({
    connections: {
      requestConnection: () => {
        fail();
        return { connection: { id: CON, status: connectionv1.ExternalStatus.PENDING } };
      },
      getConnection: () => {
        fail();
        return { connection: { id: CON, status: connectionv1.ExternalStatus.APPROVED } };
      },
      revokeConnection: () => {
        fail();
        return { connection: { id: CON, status: connectionv1.ExternalStatus.REVOKED } };
      },
    },
    files: { getFile: () => ({ file: { id: FILE, status: fileintakev1.FileStatus.RECEIVED } }) },
  });
  token = await edge.token("ptr_errors");
});
afterAll(() => edge.stop());

const bearer = () => ({ authorization: `Bearer ${token}` });

function expectEnvelope(res: Answer, status: number, code: keyof typeof PARTNER_ERRORS) {
  expect({ status: res.status, contentType: res.headers["content-type"] }).toEqual({
    status,
    contentType: "application/json; charset=utf-8",
  });
  expect(res.json).toEqual({
    error: expect.objectContaining({ code, type: PARTNER_ERRORS[code].type, message: expect.any(String) }),
  });
  expect(Object.keys(res.json.error).every((k) => ["type", "code", "message", "param"].includes(k))).toBe(true);
  expect(res.headers["x-request-id"]).toMatch(/^req_[0-9A-Za-z]{22}$/);
}

describe("unknown routes", () => {
  it("an unknown /v1 route is 404 not_found in the envelope", async () => {
    for (const path of ["/v1/elders", "/v1/connections/con_x/files", "/v1/files/file_x/content", "/v1/"]) {
      expectEnvelope(await edge.send("GET", path, { headers: bearer() }), 404, "not_found");
    }
  });

  it("an unknown /v1 route without a bearer is the 401 (the bearer is checked first)", async () => {
    const res = await edge.send("GET", "/v1/elders");
    expectEnvelope(res, 401, "unauthorized");
    expect(res.headers["www-authenticate"]).toBe('Bearer realm="partner-api"');
  });

  it("a path outside the API (and /v2, which does not exist yet) is 404 not_found in the envelope", async () => {
    expectEnvelope(await edge.send("GET", "/v2/connections"), 404, "not_found");
    expectEnvelope(await edge.send("GET", "/admin"), 404, "not_found");
    expectEnvelope(await edge.send("GET", "/v1"), 404, "not_found");
  });

  it("a malformed or undecodable id is the same 404 as an unknown one, never a 500", async () => {
    for (const path of [
      "/v1/connections/%E0%A4%A",
      "/v1/connections/con_%00",
      "/v1/files/..%2F..%2Fetc",
      "/v1/connections/file_abc",
    ]) {
      const res = await edge.send("GET", path, { headers: bearer() });
      expectEnvelope(res, 404, "not_found");
    }
  });
});

describe("wrong methods", () => {
  it.each([
    ["GET", "/v1/connections", "POST"],
    ["PUT", `/v1/connections/${CON}`, "HEAD, GET, DELETE"],
    ["PATCH", `/v1/files/${FILE}`, "HEAD, GET"],
    ["DELETE", "/v1/files", "POST"],
    ["GET", "/oauth/token", "POST"],
  ])("%s %s is 405 method_not_allowed with Allow: %s", async (method, path, allow) => {
    const res = await edge.send(method, path, { headers: bearer() });
    expectEnvelope(res, 405, "method_not_allowed");
    expect(res.headers.allow!.split(", ").sort()).toEqual(allow.split(", ").sort());
  });

  it("a method no route implements (PROPFIND) is the 405 on a known path and the 404 elsewhere, never a 501", async () => {
    const known = await edge.send("PROPFIND", "/v1/connections", { headers: bearer() });
    expectEnvelope(known, 405, "method_not_allowed");
    expect(known.headers.allow).toBe("POST");
    const unknown = await edge.send("PROPFIND", "/v1/nothing-here", { headers: bearer() });
    expectEnvelope(unknown, 404, "not_found");
    expect(unknown.headers.allow).toBeUndefined();
  });
});

describe("bodies of JSON routes", () => {
  const post = (body: string | Buffer, contentType?: string) =>
    edge.send("POST", "/v1/connections", {
      headers: { ...bearer(), ...(contentType ? { "content-type": contentType } : {}) },
      body,
    });

  it("a non-JSON body is 415 unsupported_media_type", async () => {
    expectEnvelope(
      await post("elder=apple.pear.plum@elders.example", "application/x-www-form-urlencoded"),
      415,
      "unsupported_media_type",
    );
    expectEnvelope(await post("apple.pear.plum@elders.example", "text/plain"), 415, "unsupported_media_type");
    expectEnvelope(await post("--x\r\n", "multipart/form-data; boundary=x"), 415, "unsupported_media_type");
    expectEnvelope(await post('{"elder":"apple.pear.plum@elders.example"}'), 415, "unsupported_media_type");
  });

  it("a body the JSON parser refuses is 400 invalid_request", async () => {
    for (const body of ['{"elder":', "not json", "\u0000\u0001", '{"elder": "a"}}']) {
      expectEnvelope(await post(body, "application/json"), 400, "invalid_request");
    }
    expectEnvelope(
      await post(Buffer.from('{"elder":"x"}', "utf16le"), "application/json; charset=utf-16"),
      400,
      "invalid_request",
    );
  });

  it("an oversize JSON body is 400 invalid_request, read no further than the limit", async () => {
    const res = await post(JSON.stringify({ elder: "a".repeat(64 * 1024) }), "application/json");
    expectEnvelope(res, 400, "invalid_request");
    expect(res.json.error.message).toBe("The body is larger than 16 KB.");
    expect((await post("{not json", "application/json")).json.error.message).toBe("The body is not valid JSON.");
  });

  it("well-formed JSON of the wrong shape is 400 invalid_request naming the field", async () => {
    const res = await post(
      JSON.stringify({ elder: "apple.pear.plum@elders.example", colour: "blue" }),
      "application/json",
    );
    expectEnvelope(res, 400, "invalid_request");
    expect(res.json.error.param).toBe("colour");
    expectEnvelope(await post("[]", "application/json"), 400, "invalid_request");
  });
});

describe("internal failures", () => {
  afterAll(() => {
    failure = "none";
  });

  it("an internal service that is down is 503 service_unavailable with Retry-After, and no internal detail", async () => {
    for (const mode of ["unavailable", "deadline"] as const) {
      failure = mode;
      const res = await edge.send("GET", `/v1/connections/${CON}`, { headers: bearer() });
      expectEnvelope(res, 503, "service_unavailable");
      expect(res.headers["retry-after"]).toBe("1");
      expect(res.text).not.toMatch(/ECONNREFUSED|10\.0\.3\.7|50052|connection service|ConnectionService|deadline/i);
    }
  });

  it("a call that failed on the network (refused, or reset by a crashing service) is the 503 too: grpc-js reports it UNAVAILABLE", () => {
    for (const code of ["ECONNREFUSED", "ECONNRESET", "EPIPE"]) {
      const cause = Object.assign(new Error(`connect ${code} 127.0.0.1:50052`), { code });
      const err = new RpcError(`No connection established. Last error: ${code}`, Status.UNAVAILABLE, undefined, cause);
      expect([code, partnerErrorFromInternal(err).code]).toEqual([code, "service_unavailable"]);
    }
    expect(partnerErrorFromInternal(new RpcError("late", Status.DEADLINE_EXCEEDED)).code).toBe("service_unavailable");
    expect(partnerErrorFromInternal(new RpcError("boom", Status.INTERNAL)).code).toBe("internal_error");
  });

  it("an unexpected exception is a generic 500 whose request id operators find in the logs, with no stack, service name or database error", async () => {
    failure = "internal";
    const res = await edge.send("DELETE", `/v1/connections/${CON}`, { headers: bearer() });
    expectEnvelope(res, 500, "internal_error");
    const requestId = res.headers["x-request-id"] as string;
    expect(res.json.error.message).toBe(`${PARTNER_ERRORS.internal_error.message} Request id: ${requestId}.`);
    expect(res.text).not.toMatch(
      /Mongo|E11000|pi_connection|27017|mongodb|ConnectionService|connection service|\bat \S+:\d+|Error:/,
    );
    const lines = edge.logs.filter((l) => l.requestId === requestId);
    expect(lines.map((l) => l.level).sort()).toEqual(["error", "info"]);
    // The internal service's own log holds its details; the gateway logs the failed call, with a stack.
    expect(lines.find((l) => l.level === "error")).toMatchObject({
      msg: "request failed",
      err: { type: "RpcError", code: Status.UNKNOWN, stack: expect.any(String) },
    });
    expect(lines.find((l) => l.level === "info")).toMatchObject({ method: "DELETE", status: 500 });
  });

  it("an exception thrown in the gateway itself is the same generic 500", async () => {
    const lines: string[] = [];
    const app = new Koa();
    const logger = createLogger(
      "gateway",
      "info",
      new Writable({
        write: (c, _e, done) => {
          lines.push(String(c));
          done();
        },
      }),
    );
    app.use(handleErrors(logger));
    app.use(() => {
      throw new TypeError("Cannot read properties of undefined (reading 'partnerId')");
    });
    const server = createServer(app.callback()).listen(0, "127.0.0.1");
    await new Promise((r) => server.once("listening", r));
    try {
      const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/files`);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(res.status).toBe(500);
      expect(body.error.code).toBe("internal_error");
      expect(JSON.stringify(body)).not.toMatch(/partnerId|TypeError|undefined/);
      expect(lines.some((l) => l.includes(res.headers.get("x-request-id")!) && l.includes("TypeError"))).toBe(true);
    } finally {
      server.close();
    }
  });

  it("a client error raised as an http error by Koa or a library is its 4xx, never a 500", () => {
    // The shape of an http-errors error (what ctx.throw and the body parsers raise).
    const createHttpError = (status: number, message = "x") =>
      Object.assign(new Error(message), { status, statusCode: status, expose: status < 500 });
    expect(partnerErrorFromInternal(createHttpError(400, "Bad JSON")).code).toBe("invalid_request");
    expect(partnerErrorFromInternal(createHttpError(413, "request entity too large")).code).toBe("invalid_request");
    expect(partnerErrorFromInternal(createHttpError(415, "Unsupported charset")).code).toBe("unsupported_media_type");
    expect(partnerErrorFromInternal(createHttpError(405)).code).toBe("method_not_allowed");
    expect(partnerErrorFromInternal(createHttpError(404)).code).toBe("not_found");
    // A server error, or one not meant to be shown, stays the generic 500.
    expect(partnerErrorFromInternal(createHttpError(502)).code).toBe("internal_error");
    expect(partnerErrorFromInternal(Object.assign(new Error("x"), { status: 400, expose: false })).code).toBe(
      "internal_error",
    );
  });
});

describe("answers outside the envelope", () => {
  it("the token endpoint keeps the OAuth error shape for its own errors", async () => {
    const res = await edge.send("POST", "/oauth/token", { headers: { "content-type": "application/json" }, body: "{" });
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ error: "invalid_request", error_description: expect.any(String) });
  });

  it("every answer carries X-Request-Id, successes too", async () => {
    const res = await edge.send("GET", `/v1/files/${FILE}`, { headers: bearer() });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ id: FILE, status: "received" });
    expect(res.headers["x-request-id"]).toMatch(/^req_/);
  });
});
