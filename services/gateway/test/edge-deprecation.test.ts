import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { parseSettings } from "@pi/common/runtime/settings";
import { connectionv1, fileintakev1 } from "@pi/proto";
import { deprecationFor, deprecationHeaders } from "../src/deprecation.js";
import { startEdge, type Edge } from "./edge-harness.js";

// Versioning: a deprecated version or operation is announced with Deprecation and Sunset headers,
// configured in API_DEPRECATIONS (never hard-coded).

const rule = (
  route: string,
  deprecation = "2026-01-01T00:00:00Z",
  extra: Partial<Record<"sunset" | "link", string>> = {},
) => parseSettings({ API_DEPRECATIONS: JSON.stringify([{ route, deprecation, ...extra }]) }).API_DEPRECATIONS[0]!;

describe("which rule applies", () => {
  const version = rule("/v1");
  const getConnection = rule("GET /v1/connections/{id}", "2026-03-01T00:00:00Z");

  it("a version rule covers every path of that version, and nothing else", () => {
    expect(deprecationFor([version], "POST", "/v1/files")).toBe(version);
    expect(deprecationFor([version], "GET", "/v1/connections/con_abc")).toBe(version);
    expect(deprecationFor([version], "GET", "/v10/files")).toBeUndefined();
    expect(deprecationFor([version], "POST", "/oauth/token")).toBeUndefined();
  });

  it("an operation rule covers its method and path template only (HEAD counts as GET)", () => {
    expect(deprecationFor([getConnection], "GET", "/v1/connections/con_abc")).toBe(getConnection);
    expect(deprecationFor([getConnection], "HEAD", "/v1/connections/con_abc")).toBe(getConnection);
    expect(deprecationFor([getConnection], "DELETE", "/v1/connections/con_abc")).toBeUndefined();
    expect(deprecationFor([getConnection], "GET", "/v1/connections/con_abc/extra")).toBeUndefined();
    expect(deprecationFor([getConnection], "GET", "/v1/files/file_abc")).toBeUndefined();
  });

  it("an operation rule wins over its version's rule, whatever the order", () => {
    expect(deprecationFor([version, getConnection], "GET", "/v1/connections/con_abc")).toBe(getConnection);
    expect(deprecationFor([getConnection, version], "DELETE", "/v1/connections/con_abc")).toBe(version);
  });
});

describe("the headers", () => {
  it("are Deprecation (RFC 9745, @ Unix seconds), Sunset (RFC 8594, an HTTP-date) and Link rel=deprecation", () => {
    const r = rule("/v1", "2026-01-01T00:00:00Z", {
      sunset: "2026-07-01T12:00:00+02:00",
      link: "https://partners.example/changelog#v1",
    });
    expect(deprecationHeaders(r)).toEqual({
      Deprecation: "@1767225600",
      Sunset: "Wed, 01 Jul 2026 10:00:00 GMT",
      Link: '<https://partners.example/changelog#v1>; rel="deprecation"; type="text/html"',
    });
    expect(deprecationHeaders(rule("/v1"))).toEqual({ Deprecation: "@1767225600" });
  });
});

describe("API_DEPRECATIONS (the setting)", () => {
  it("is empty by default", () => {
    expect(parseSettings({}).API_DEPRECATIONS).toEqual([]);
  });

  it.each([
    ["not JSON", "v1 is deprecated"],
    ["not an array", '{"route":"/v1","deprecation":"2026-01-01T00:00:00Z"}'],
    [
      "a route that is not a version or an operation",
      '[{"route":"/connections","deprecation":"2026-01-01T00:00:00Z"}]',
    ],
    ["an unknown method", '[{"route":"FETCH /v1/files","deprecation":"2026-01-01T00:00:00Z"}]'],
    ["a date without a time", '[{"route":"/v1","deprecation":"2026-01-01"}]'],
    [
      "a sunset before the deprecation",
      '[{"route":"/v1","deprecation":"2026-01-01T00:00:00Z","sunset":"2025-12-31T00:00:00Z"}]',
    ],
    [
      "a sunset less than the 180-day notice period after the deprecation",
      '[{"route":"/v1","deprecation":"2026-01-01T00:00:00Z","sunset":"2026-06-29T23:59:59Z"}]',
    ],
    ["an unknown field", '[{"route":"/v1","deprecation":"2026-01-01T00:00:00Z","sunsett":"2027-01-01T00:00:00Z"}]'],
    [
      "a link that is not http(s)",
      '[{"route":"/v1","deprecation":"2026-01-01T00:00:00Z","link":"javascript:alert(1)"}]',
    ],
  ])("refuses %s, naming the setting", (_name, value) => {
    expect(() => parseSettings({ API_DEPRECATIONS: value })).toThrow(/^invalid setting API_DEPRECATIONS/);
  });
});

describe("a gateway configured with deprecations", () => {
  const CON = "con_3kT9xQ2mVb7LpR4sN8wZcY";
  const FILE = "file_9fH2kL5nQ8rT1vX4zB7cD3";
  let edge: Edge;
  let plain: Edge;
  let auth: Record<string, string>;
  const rules: unknown[] = [
    {
      route: "GET /v1/connections/{id}",
      deprecation: "2026-01-01T00:00:00Z",
      sunset: "2026-07-01T00:00:00Z",
      link: "https://partners.example/changelog",
    },
  ];
  const services = {
    connections: { getConnection: () => ({ connection: { id: CON, status: connectionv1.ExternalStatus.APPROVED } }) },
    files: { getFile: () => ({ file: { id: FILE, status: fileintakev1.FileStatus.PROCESSED } }) },
  };

  beforeAll(async () => {
    edge = await startEdge({ settings: { API_DEPRECATIONS: JSON.stringify(rules) }, ...services });
    plain = await startEdge(services);
    auth = { authorization: `Bearer ${await edge.token("ptr_dep")}` };
  });
  afterAll(() => Promise.all([edge.stop(), plain.stop()]));

  it("adds Deprecation, Sunset and Link to the deprecated operation's answers, errors included", async () => {
    const ok = await edge.send("GET", `/v1/connections/${CON}`, { headers: auth });
    expect(ok.status).toBe(200);
    expect(ok.headers).toMatchObject({
      deprecation: "@1767225600",
      sunset: "Wed, 01 Jul 2026 00:00:00 GMT",
      link: '<https://partners.example/changelog>; rel="deprecation"; type="text/html"',
    });
    const unauthorized = await edge.send("GET", `/v1/connections/${CON}`);
    expect(unauthorized.status).toBe(401);
    expect(unauthorized.headers.deprecation).toBe("@1767225600");
  });

  it("leaves the other operations alone", async () => {
    const other = await edge.send("GET", `/v1/files/${FILE}`, { headers: auth });
    expect(other.status).toBe(200);
    expect(other.headers.deprecation).toBeUndefined();
    expect(other.headers.sunset).toBeUndefined();
  });

  it("adds nothing when nothing is configured", async () => {
    const res = await plain.send("GET", `/v1/connections/${CON}`, {
      headers: { authorization: `Bearer ${await plain.token("ptr_dep")}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.deprecation).toBeUndefined();
    expect(res.headers.sunset).toBeUndefined();
  });
});
