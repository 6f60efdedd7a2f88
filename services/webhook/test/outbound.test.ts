import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { LookupAddress } from "node:dns";
import { guardedLookup, type Resolver } from "@pi/common/runtime/egress";
import { webhookUrlRefusal as urlRefusal } from "@pi/common/rules/webhook-url";
import { WebhookSender } from "../src/outbound.js";

// Real HTTP servers on 127.0.0.1 stand in for partner endpoints.

interface Seen {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: string;
}

async function serve(
  handler: (req: IncomingMessage, res: ServerResponse, seen: Seen[]) => void,
): Promise<{ server: Server; port: number; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      seen.push({
        method: req.method!,
        path: req.url!,
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      });
      handler(req, res, seen);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as { port: number }).port, seen };
}

const closeAll = (servers: Server[]) =>
  Promise.all(
    servers.map(
      (s) =>
        new Promise<void>((r) => {
          s.close(() => r());
          s.closeAllConnections();
        }),
    ),
  );

/** A resolver whose answers the test decides: the DNS of an attacker who controls a name. */
function fakeDns(table: Record<string, string[]>, calls: string[] = []): Resolver {
  return (hostname, _options, callback) => {
    calls.push(hostname);
    const addresses = table[hostname];
    if (!addresses)
      return callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }), []);
    callback(
      null,
      addresses.map((address): LookupAddress => ({ address, family: address.includes(":") ? 6 : 4 })),
    );
  };
}

const servers: Server[] = [];
let ok: Awaited<ReturnType<typeof serve>>;
let big: Awaited<ReturnType<typeof serve>>;
let redirect: Awaited<ReturnType<typeof serve>>;
let silent: Awaited<ReturnType<typeof serve>>;
let status: Awaited<ReturnType<typeof serve>>;

beforeAll(async () => {
  ok = await serve((_req, res) => res.writeHead(200, { "content-type": "text/plain" }).end("thanks"));
  big = await serve((_req, res) => {
    res.writeHead(200);
    // Far more than the cap; the sender must stop reading early.
    res.write("x".repeat(64 * 1024));
    res.end("y".repeat(1024 * 1024));
  });
  redirect = await serve((_req, res) =>
    res.writeHead(307, { location: `http://127.0.0.1:${ok.port}/elsewhere` }).end(),
  );
  silent = await serve(() => {
    // accepts the request and never answers
  });
  status = await serve((req, res) => res.writeHead(Number(req.url!.slice(1))).end(`status ${req.url}`));
  servers.push(ok.server, big.server, redirect.server, silent.server, status.server);
});
afterAll(() => closeAll(servers));

describe("webhook sender", () => {
  const insecure = new WebhookSender({ allowInsecure: true, timeoutMs: 1500 });
  afterAll(() => insecure.agent.close());

  it("POSTs the raw body as application/json with the given signature header", async () => {
    const body = '{"id":"evt_1","type":"connection.approved"}';
    const outcome = await insecure.post(`http://127.0.0.1:${ok.port}/hooks?x=1`, body, {
      "service-signature": "t=1,v1=ab",
    });
    expect(outcome).toMatchObject({ delivered: true, statusCode: 200, responseExcerpt: "thanks" });
    const req = ok.seen[ok.seen.length - 1]!;
    expect(req).toMatchObject({ method: "POST", path: "/hooks?x=1", body });
    expect(req.headers["content-type"]).toBe("application/json");
    expect(req.headers["service-signature"]).toBe("t=1,v1=ab");
  });

  it.each([200, 201, 202, 204, 299])("counts %i as delivered", async (code) => {
    expect((await insecure.post(`http://127.0.0.1:${status.port}/${code}`, "{}", {})).delivered).toBe(true);
  });

  it.each([300, 304, 400, 401, 404, 410, 429, 500, 502, 503])(
    "counts %i as not delivered, keeping the status code",
    async (code) => {
      const outcome = await insecure.post(`http://127.0.0.1:${status.port}/${code}`, "{}", {});
      expect(outcome).toMatchObject({ delivered: false, statusCode: code });
    },
  );

  it("does not follow redirects: a 307 is a failed attempt and the target is never called", async () => {
    const before = ok.seen.length;
    const outcome = await insecure.post(`http://127.0.0.1:${redirect.port}/`, "{}", {});
    expect(outcome).toMatchObject({ delivered: false, statusCode: 307 });
    expect(ok.seen.length).toBe(before);
  });

  it("reads a response body only up to a small cap", async () => {
    const outcome = await insecure.post(`http://127.0.0.1:${big.port}/`, "{}", {});
    expect(outcome.delivered).toBe(true);
    expect(outcome.responseExcerpt.length).toBe(1024);
  });

  it("gives up on an endpoint that accepts and never answers after the timeout, with no status", async () => {
    const outcome = await insecure.post(`http://127.0.0.1:${silent.port}/`, "{}", {});
    expect(outcome).toMatchObject({ delivered: false, statusCode: 0, error: "no answer within 1.5 s" });
    expect(outcome.durationMs).toBeGreaterThanOrEqual(1400);
    expect(outcome.durationMs).toBeLessThan(5000);
  });

  it("reports a refused connection as an error without a status", async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const outcome = await insecure.post(`http://127.0.0.1:${port}/`, "{}", {});
    expect(outcome).toMatchObject({ delivered: false, statusCode: 0 });
    expect(outcome.error).toMatch(/ECONNREFUSED/);
  });
});

describe("outbound safety with WEBHOOK_ALLOW_INSECURE_URLS=false", () => {
  it.each([
    ["http://example.com/hook", /must use https/],
    ["ftp://example.com/hook", /must use https/],
    ["https://user:pw@example.com/hook", /credentials/],
    ["not a url", /absolute URL/],
    ["https://127.0.0.1/hook", /not an IP address or localhost/],
    ["https://10.1.2.3/hook", /not an IP address/],
    ["https://169.254.169.254/latest/meta-data", /not an IP address/],
    ["https://[::1]/hook", /not an IP address/],
    ["https://[::ffff:127.0.0.1]/hook", /not an IP address/],
    ["https://[fd00:ec2::254]/hook", /not an IP address/],
    ["https://2130706433/hook", /not an IP address/],
    ["https://0x7f.1/hook", /not an IP address/],
    ["https://93.184.216.34/hook", /not an IP address/],
    ["https://[2606:4700:4700::1111]/hook", /not an IP address/],
    ["https://localhost/hook", /localhost/],
  ])(
    "refuses %s before connecting (the registration rule, services/common/src/rules/webhook-url.ts)",
    (url, reason) => {
      expect(urlRefusal(url, false)).toMatch(reason);
    },
  );

  it("lets a named host through to the connect-time check", () => {
    expect(urlRefusal("https://example.com/hook", false)).toBeUndefined();
  });

  it("with insecure URLs allowed, http and loopback are fine", () => {
    expect(urlRefusal("http://127.0.0.1:8080/hook", true)).toBeUndefined();
    expect(urlRefusal("ftp://127.0.0.1/hook", true)).toMatch(/http or https/);
  });

  it("the socket lookup keeps only public addresses and refuses a name with none", async () => {
    const lookup = guardedLookup(
      fakeDns({
        "mixed.test": ["127.0.0.1", "93.184.216.34", "10.0.0.1"],
        "inside.test": ["127.0.0.1", "::1", "169.254.169.254"],
      }),
    );
    const all = await new Promise((resolve, reject) =>
      lookup("mixed.test", { all: true }, (err, addresses) => (err ? reject(err) : resolve(addresses))),
    );
    expect(all).toEqual([{ address: "93.184.216.34", family: 4 }]);
    const one = await new Promise((resolve, reject) =>
      lookup("mixed.test", {}, (err, address, family) => (err ? reject(err) : resolve({ address, family }))),
    );
    expect(one).toEqual({ address: "93.184.216.34", family: 4 });
    await expect(
      new Promise((resolve, reject) =>
        lookup("inside.test", { all: true }, (err, a) => (err ? reject(err) : resolve(a))),
      ),
    ).rejects.toThrow(/inside\.test resolves to no public address \(127\.0\.0\.1, ::1, 169\.254\.169\.254\)/);
  });

  it("refuses loopback and private targets at connect time: a name that resolves to the receiver's address never reaches it", async () => {
    const calls: string[] = [];
    const sender = new WebhookSender({
      allowInsecure: false,
      timeoutMs: 2000,
      resolve: fakeDns(
        { "rebound.partner.test": ["127.0.0.1"], "private.partner.test": ["10.0.0.7", "192.168.1.1"] },
        calls,
      ),
    });
    try {
      const before = ok.seen.length;
      const rebound = await sender.post(`https://rebound.partner.test:${ok.port}/hook`, "{}", {});
      expect(rebound).toMatchObject({ delivered: false, statusCode: 0 });
      expect(rebound.error).toMatch(/^refused: rebound\.partner\.test resolves to no public address \(127\.0\.0\.1\)/);
      const priv = await sender.post(`https://private.partner.test:${ok.port}/hook`, "{}", {});
      expect(priv.error).toMatch(/^refused: private\.partner\.test resolves to no public address/);
      // The check ran in the socket's lookup, at connect time.
      expect(calls).toEqual(["rebound.partner.test", "private.partner.test"]);
      expect(ok.seen.length).toBe(before);
    } finally {
      await sender.agent.close();
    }
  });

  it("refuses https://localhost before connecting, and the system's own DNS answer for it at connect time", async () => {
    const sender = new WebhookSender({ allowInsecure: false, timeoutMs: 2000 });
    try {
      const before = ok.seen.length;
      const outcome = await sender.post(`https://localhost:${ok.port}/hook`, "{}", {});
      expect(outcome).toMatchObject({ delivered: false, statusCode: 0 });
      expect(outcome.error).toMatch(/^refused: webhook url must name a public host/);
      expect(ok.seen.length).toBe(before);
    } finally {
      await sender.agent.close();
    }
    const lookup = guardedLookup();
    const err = await new Promise<Error | null>((resolve) => lookup("localhost", { all: true }, (e) => resolve(e)));
    expect(err?.message).toMatch(/^localhost resolves to no public address/);
  });
});
