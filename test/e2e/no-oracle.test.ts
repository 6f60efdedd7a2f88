import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Agent, createServer, request, type Server } from "node:http";
import type { Socket, AddressInfo } from "node:net";
import { CONNECTION_REFUSAL_MS } from "../../services/file-intake/src/no-oracle.js";
import { assertionBody, NO_RATE_LIMITS, partnerKey } from "../support/auth.js";
import {
  connectedPartner,
  type ConnectedPartner,
  fixture,
  type Response,
  sendFile,
  waitForStatus,
} from "../support/files.js";
import { accessToken, basicAuthorization, call, opsFor } from "../support/partner-api.js";
import { startTestStack, type TestStack } from "../support/services.js";

// The no-oracle guarantees end to end: the token endpoint's one invalid_client for every credential
// failure, and the file routes' one 403 and one 404, byte for byte.

describe("auth no oracle", () => {
  // No-oracle guarantee 5: every credential failure at the token endpoint (unknown client, bad
  // secret, revoked credential, suspended partner; and for private_key_jwt, every way an assertion
  // fails) returns the identical invalid_client error, in body and headers (only Date may differ),
  // with equivalent timing.

  const TOKEN_ENDPOINT = "https://partners.example/oauth/token";
  let stack: TestStack;
  type Failure = "unknown client" | "wrong secret" | "revoked credential" | "suspended partner";
  type SecretKind = `${Failure} (${"body" | "basic"})`;
  type AssertionFailure =
    | "unknown client"
    | "unknown key"
    | "bad signature"
    | "wrong aud"
    | "expired"
    | "replayed jti"
    | "revoked credential"
    | "suspended partner"
    | "malformed";
  type AssertionKind = `${AssertionFailure} (private_key_jwt)`;
  type Kind = SecretKind | AssertionKind;
  const bodies = {} as Record<Failure, Record<string, string>>;
  /** Each assertion failure: a fresh failing assertion per request (signed before the clock starts). */
  const assertions = {} as Record<AssertionFailure, () => Promise<string>>;
  const ASSERTION_FAILURES: AssertionFailure[] = [
    "unknown client",
    "unknown key",
    "bad signature",
    "wrong aud",
    "expired",
    "replayed jti",
    "revoked credential",
    "suspended partner",
    "malformed",
  ];

  beforeAll(async () => {
    stack = await startTestStack({ ...NO_RATE_LIMITS, TOKEN_ENDPOINT_URL: TOKEN_ENDPOINT });
    const ops = opsFor(stack.settings);
    // private_key_jwt: every key ES384, so every failure costs one signature check of the same kind.
    const keyed = async (name: string) => {
      const key = await partnerKey("ES384", "k1");
      const partner = await ops.partnerCreate({ name });
      const { client_id } = (await ops.credentialCreate(partner.partner_id, "live", {
        jwksJson: JSON.stringify(key.jwks),
      })) as { client_id: string };
      return { key, partner, clientId: client_id };
    };
    const good = await keyed("Good Standing Key Lab");
    const revokedKeyed = await keyed("Revoked Key Lab");
    await ops.credentialRevoke(revokedKeyed.clientId);
    const suspendedKeyed = await keyed("Suspended Key Lab");
    await ops.partnerSetStatus(suspendedKeyed.partner.partner_id, "suspended");
    const stranger = await partnerKey("ES384", "k1");
    const sign = (k: typeof good, change: Parameters<typeof good.key.assertion>[2] = {}) =>
      k.key.assertion(k.clientId, TOKEN_ENDPOINT, change);
    assertions["unknown client"] = () => good.key.assertion("cli_0000000000000000000000", TOKEN_ENDPOINT);
    assertions["unknown key"] = () => sign(good, { header: { kid: "k-unknown" } });
    assertions["bad signature"] = () => stranger.assertion(good.clientId, TOKEN_ENDPOINT);
    assertions["wrong aud"] = () => good.key.assertion(good.clientId, "https://partners.example");
    assertions.expired = () => sign(good, { claims: { exp: Math.floor(Date.now() / 1000) - 1 } });
    assertions["replayed jti"] = async () => {
      const used = await sign(good);
      const first = await post(...encodings.form(assertionBody(used)));
      if (first.status !== 200) throw new Error(`the first use of an assertion failed: ${first.text}`);
      return used;
    };
    assertions["revoked credential"] = () => sign(revokedKeyed);
    assertions["suspended partner"] = () => sign(suspendedKeyed);
    // A JWS of the same size whose header is not JSON.
    assertions.malformed = async () => `x${(await sign(good)).slice(1)}`;
    const ok = await ops.partnerCreate({ name: "Good Standing Clinic" });
    const revoked = await ops.partnerCreate({ name: "Revoked Credential Clinic" });
    await ops.credentialRevoke(revoked.live.client_id);
    const suspended = await ops.partnerCreate({ name: "Suspended Clinic" });
    await ops.partnerSetStatus(suspended.partner_id, "suspended");
    const grant = "client_credentials";
    bodies["unknown client"] = {
      grant_type: grant,
      client_id: "cli_0000000000000000000000",
      client_secret: ok.live.client_secret,
    };
    bodies["wrong secret"] = {
      grant_type: grant,
      client_id: ok.live.client_id,
      client_secret: revoked.live.client_secret,
    };
    bodies["revoked credential"] = {
      grant_type: grant,
      client_id: revoked.live.client_id,
      client_secret: revoked.live.client_secret,
    };
    bodies["suspended partner"] = {
      grant_type: grant,
      client_id: suspended.live.client_id,
      client_secret: suspended.live.client_secret,
    };
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const failures = (): Failure[] => Object.keys(bodies) as Failure[];
  const secretKinds = (): SecretKind[] => failures().flatMap((f) => [`${f} (body)`, `${f} (basic)`] as SecretKind[]);
  const assertionKinds = (): AssertionKind[] =>
    ASSERTION_FAILURES.map((f) => `${f} (private_key_jwt)` as AssertionKind);
  const kinds = (): Kind[] => [...secretKinds(), ...assertionKinds()];

  /** The request of one kind: the credentials in the body, in a Basic header with only grant_type in the body, or an assertion. */
  async function requestOf(
    kind: Kind,
    encoding: keyof typeof encodings,
  ): Promise<[string, string, Record<string, string>]> {
    const [failure, method] = kind.split(" (") as [Failure, string];
    if (method === "private_key_jwt)")
      return [...encodings[encoding](assertionBody(await assertions[failure as AssertionFailure]())), {}];
    const { client_id, client_secret, ...rest } = bodies[failure];
    if (method === "body)") return [...encodings[encoding](bodies[failure]), {}];
    return [...encodings[encoding](rest), { authorization: basicAuthorization(client_id!, client_secret!) }];
  }

  // One kept-alive connection for the timing samples: less scheduling noise than a connection each.
  const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });
  afterAll(() => keepAlive.destroy());

  /** One request (on a fresh connection unless `agent` is given), with the raw header lines as sent. */
  function post(
    body: string,
    contentType: string,
    extraHeaders: Record<string, string> = {},
    agent: Agent | false = false,
  ): Promise<{ status: number; rawHeaders: string[]; text: string; ms: number }> {
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const req = request(
        `${stack.baseUrl}/oauth/token`,
        {
          method: "POST",
          agent,
          headers: { "content-type": contentType, "content-length": Buffer.byteLength(body), ...extraHeaders },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({
              status: res.statusCode!,
              rawHeaders: res.rawHeaders,
              text: Buffer.concat(chunks).toString(),
              ms: performance.now() - started,
            }),
          );
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  }

  const encodings = {
    form: (b: Record<string, string>) =>
      [new URLSearchParams(b).toString(), "application/x-www-form-urlencoded"] as const,
    json: (b: Record<string, string>) => [JSON.stringify(b), "application/json"] as const,
  };

  /** Header lines in order, without Date, as "Name: value". */
  const headerLines = (raw: string[]) =>
    raw.flatMap((v, i) => (i % 2 === 0 ? [`${v}: ${raw[i + 1]}`] : [])).filter((line) => !/^date:/i.test(line));

  /** The q-quantile by linear interpolation between the closest ranks. */
  const quantile = (xs: number[], q: number) => {
    const s = [...xs].sort((a, b) => a - b);
    const at = (s.length - 1) * q;
    const below = s[Math.floor(at)]!;
    return below + (s[Math.ceil(at)]! - below) * (at - Math.floor(at));
  };

  describe("no-oracle guarantee 5", () => {
    it.each(Object.keys(encodings) as (keyof typeof encodings)[])(
      "no-oracle guarantee 5: the four credential failures, by body fields and by HTTP Basic, and every private_key_jwt assertion failure give byte-identical bodies and headers apart from Date (%s body)",
      async (encoding) => {
        const results = [];
        for (const kind of kinds()) results.push({ kind, ...(await post(...(await requestOf(kind, encoding)))) });
        for (const r of results) {
          expect(r.status).toBe(400);
          expect(JSON.parse(r.text)).toEqual({ error: "invalid_client", error_description: expect.any(String) });
        }
        const [first, ...rest] = results;
        for (const r of rest) {
          expect({ kind: r.kind, text: r.text }).toEqual({ kind: r.kind, text: first!.text });
          expect({ kind: r.kind, headers: headerLines(r.rawHeaders) }).toEqual({
            kind: r.kind,
            headers: headerLines(first!.rawHeaders),
          });
        }
        expect(headerLines(first!.rawHeaders)).toEqual(expect.arrayContaining(["Cache-Control: no-store"]));
      },
    );

    it("no-oracle guarantee 5: lower-quartile latencies of the four failures, by body fields and by HTTP Basic, and of the nine private_key_jwt assertion failures, over interleaved samples differ by less than 35% or 3 ms", async () => {
      // Interleaved in a fresh random order each round, so drift in the machine's load falls on every
      // kind alike. Load only ever adds time, so each kind is summed up by its lower quartile, the
      // statistic remote timing attacks themselves use (Crosby et al., 2009): a difference in the
      // work done shifts it, a burst of another process's load mostly does not. A burst can still
      // skew one sample set, so the bar must be met by one of three independent measurements; a real
      // difference fails all three.
      // Kinds are compared within a method (secret or assertion): the client chose its method, so
      // what that choice costs tells it nothing it did not know.
      const measure = async () => {
        const samples = Object.fromEntries(kinds().map((k) => [k, [] as number[]])) as Record<Kind, number[]>;
        for (let round = -5; round < 60; round++) {
          for (const kind of kinds().sort(() => Math.random() - 0.5)) {
            const request = await requestOf(kind, "form");
            const { ms, status } = await post(...request, keepAlive);
            expect(status).toBe(400);
            if (round >= 0) samples[kind].push(ms);
          }
        }
        return Object.fromEntries(kinds().map((k) => [k, quantile(samples[k], 0.25)])) as Record<Kind, number>;
      };
      const sameMethod = (a: Kind, b: Kind) => a.endsWith("(private_key_jwt)") === b.endsWith("(private_key_jwt)");
      const unequal = (quartiles: Record<Kind, number>) =>
        kinds().flatMap((a) =>
          kinds()
            .filter((b) => a < b && sameMethod(a, b))
            .filter((b) => {
              const diff = Math.abs(quartiles[a] - quartiles[b]);
              return !(diff < 3 || diff / Math.min(quartiles[a], quartiles[b]) < 0.35);
            })
            .map((b) => `${a} / ${b}`),
        );
      const attempts: { quartiles: Record<Kind, number>; unequal: string[] }[] = [];
      do {
        const quartiles = await measure();
        attempts.push({ quartiles, unequal: unequal(quartiles) });
      } while (attempts.at(-1)!.unequal.length > 0 && attempts.length < 3);
      const rounded = attempts.map((a) =>
        Object.fromEntries(Object.entries(a.quartiles).map(([k, v]) => [k, Math.round(v * 100) / 100])),
      );
      process.stderr.write(`guarantee 5 lower quartiles (ms), per attempt: ${JSON.stringify(rounded)}\n`);
      expect(attempts.at(-1)!.unequal).toEqual([]);
    }, 900_000); // seventeen request kinds: the four by body and by Basic, the nine assertion failures
  });
});

describe("files no oracle", () => {
  // The two no-oracle guarantees of the file routes, at byte level: one 403 for every reason a send is
  // refused for want of a connection, one 404 for every id that is not the caller's.

  let stack: TestStack;
  let p: ConnectedPartner;
  let ops: ReturnType<typeof opsFor>;
  let testToken: string;
  let sandbox: string;

  /** Headers that differ between any two responses by nature (the clock, the request's own id) are left out. */
  function comparable(res: Response) {
    const headers = [...res.headers.entries()].filter(([name]) => name !== "date" && name !== "x-request-id").sort();
    return { status: res.status, headers, body: res.text };
  }

  async function waitForConnection(token: string, id: string, status: string) {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const res = await call(stack.baseUrl, token, "GET", `/v1/connections/${id}`);
      if (res.json?.status === status) return;
      if (Date.now() > deadline) throw new Error(`connection ${id} is ${res.text}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  beforeAll(async () => {
    stack = await startTestStack({ SANDBOX_APPROVAL_DELAY_SECONDS: "0" });
    ops = opsFor(stack.settings);
    p = await connectedPartner(stack, "Oracle Pharmacy");
    testToken = await accessToken(stack.baseUrl, p.test.clientId, p.test.clientSecret);
    sandbox = (await ops.info()).sandbox_elder_address;
  });
  afterAll(async () => {
    await stack?.stop();
  });

  describe("POST /v1/files without an active connection", () => {
    /** Every way this partner can lack an active connection to the address it sends to: [name, token, address]. */
    async function refusedCases(): Promise<[string, string, string][]> {
      const domain = stack.settings.ADDRESS_DOMAIN;
      const connect = async (token: string, elder: string) =>
        (await call(stack.baseUrl, token, "POST", "/v1/connections", { elder })).json!.id as string;

      const pending = (await ops.elderCreate()).address;
      await connect(p.token, pending);

      const declined = (await ops.elderCreate()).address;
      await ops.connectionAct("decline", await connect(p.token, declined));

      const severed = (await ops.elderCreate()).address;
      const severedId = await connect(p.token, severed);
      await ops.connectionAct("approve", severedId);
      await ops.connectionAct("sever", severedId);

      const deleted = (await ops.elderCreate()).address;
      const deletedId = await connect(p.token, deleted);
      await ops.connectionAct("approve", deletedId);
      await call(stack.baseUrl, p.token, "DELETE", `/v1/connections/${deletedId}`);

      const neverAsked = (await ops.elderCreate()).address;

      // Another partner's approved connection gives this partner nothing.
      const other = await connectedPartner(stack, "Someone Else");

      return [
        ["an unresolvable address", p.token, `nobody.lives.here@${domain}`],
        ["an elder never asked", p.token, neverAsked],
        ["an unconsented elder (pending)", p.token, pending],
        ["an unconsented elder (declined)", p.token, declined],
        ["a connection the caregiver revoked", p.token, severed],
        ["a connection the partner revoked", p.token, deleted],
        ["another partner's approved elder", p.token, other.elder],
        ["a live token to the sandbox elder", p.token, sandbox],
        ["a test token to a real elder with an approved live connection", testToken, p.elder],
      ];
    }

    let cases: [string, string, string][];
    beforeAll(async () => {
      cases = await refusedCases();
    });

    it("no-oracle guarantee 2: the identical 403 no_active_connection (status, headers, body bytes) whatever the reason", async () => {
      const bytes = fixture("sample.txt");
      const responses = [];
      for (const [name, token, elder] of cases)
        responses.push({
          name,
          ...comparable(await sendFile(stack.baseUrl, token, elder, bytes, { purpose: "care_note" })),
        });
      const [first] = responses;
      expect(first!.status).toBe(403);
      expect(JSON.parse(first!.body)).toEqual({
        error: {
          type: "permission_error",
          code: "no_active_connection",
          message: "There is no active connection to this elder.",
        },
      });
      for (const r of responses)
        expect({ name: r.name, status: r.status, headers: r.headers, body: r.body }).toEqual({
          ...first,
          name: r.name,
        });
      // The control: the same request to the approved elder is accepted.
      expect((await sendFile(stack.baseUrl, p.token, p.elder, bytes, { purpose: "care_note" })).status).toBe(202);
    });

    it("no-oracle guarantee 2: the 403 takes the same time whatever the reason", async () => {
      const bytes = fixture("sample.txt");
      const rounds = 11;
      const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
      const times = new Map<string, number[]>(cases.map(([name]) => [name, []]));
      const offsets = new Map<string, number[]>(cases.map(([name]) => [name, []]));
      for (let round = 0; round < rounds; round++) {
        // Interleaved, in a different order each round, so that load drifts hit every case alike;
        // each time is also taken relative to its round's median, which cancels slow drifts.
        const order = [...cases].sort(() => Math.random() - 0.5);
        const took = new Map<string, number>();
        for (const [name, token, elder] of order) {
          const started = performance.now();
          const res = await sendFile(stack.baseUrl, token, elder, bytes);
          took.set(name, performance.now() - started);
          expect(res.status).toBe(403);
        }
        const mid = median([...took.values()]);
        for (const [name, ms] of took) {
          times.get(name)!.push(ms);
          offsets.get(name)!.push(ms - mid);
        }
      }
      const medians = [...offsets.entries()].map(([name, xs]) => ({
        name,
        offset: median(xs),
        ms: median(times.get(name)!),
      }));
      const spread = Math.max(...medians.map((m) => m.offset)) - Math.min(...medians.map((m) => m.offset));
      const summary = JSON.stringify(
        medians.map((m) => `${m.name}: ${m.ms.toFixed(1)} ms (${m.offset >= 0 ? "+" : ""}${m.offset.toFixed(1)})`),
      );
      // Every "no" is held to the same time after the check started, so the check's own timing
      // (which may differ with the reason) is hidden: no case is systematically faster or slower.
      // The margin only absorbs a shared machine's noise; a path that skipped storing the bytes, or
      // answered before reading them, would stand out by hundreds of milliseconds.
      for (const m of medians) expect(m.ms).toBeGreaterThanOrEqual(CONNECTION_REFUSAL_MS);
      if (spread >= 100) throw new Error(`median 403 times differ by ${spread.toFixed(1)} ms: ${summary}`);
    }, 240_000);
  });

  describe("GET /v1/files/{id} for an id that is not the caller's", () => {
    it("no-oracle guarantee 3: unknown, another partner's, the other mode's and malformed ids give the identical 404 (status, headers, body bytes)", async () => {
      const own = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"));
      expect(own.status).toBe(202);
      const ownId = own.json!.id as string;

      const other = await connectedPartner(stack, "Other Lab");
      const foreign = await sendFile(stack.baseUrl, other.token, other.elder, fixture("sample.txt"));
      expect(foreign.status).toBe(202);

      const sandboxCon = await call(stack.baseUrl, testToken, "POST", "/v1/connections", { elder: sandbox });
      await waitForConnection(testToken, sandboxCon.json!.id as string, "approved");
      const testFile = await sendFile(stack.baseUrl, testToken, sandbox, fixture("sample.txt"));
      expect(testFile.status).toBe(202);

      const ids: [string, string, string][] = [
        ["an unknown id", p.token, "file_0123456789ABCDEFGHIJab"],
        ["another partner's id", p.token, foreign.json!.id as string],
        ["the partner's test file, asked with its live token", p.token, testFile.json!.id as string],
        ["the partner's live file, asked with its test token", testToken, ownId],
        ["a malformed id", p.token, "file_x"],
        ["a connection's id", p.token, other.connectionId],
        ["an id of 300 characters", p.token, `file_${"a".repeat(295)}`],
        ["an id with encoded characters", p.token, "file_%2e%2e%2fsecret"],
      ];
      const responses = [];
      for (const [name, token, id] of ids)
        responses.push({ name, ...comparable(await call(stack.baseUrl, token, "GET", `/v1/files/${id}`)) });
      const [first] = responses;
      expect(first!.status).toBe(404);
      expect(JSON.parse(first!.body)).toEqual({
        error: { type: "invalid_request_error", code: "not_found", message: "No such resource." },
      });
      for (const r of responses) expect(r).toEqual({ ...first, name: r.name });

      // The control: each owner reads its own file.
      expect((await call(stack.baseUrl, p.token, "GET", `/v1/files/${ownId}`)).status).toBe(200);
      expect((await call(stack.baseUrl, other.token, "GET", `/v1/files/${foreign.json!.id}`)).status).toBe(200);
      expect((await call(stack.baseUrl, testToken, "GET", `/v1/files/${testFile.json!.id}`)).status).toBe(200);
    });
  });

  describe("GET /v1/files/{id} of a processed file, which the gateway keeps (terminal-status cache)", () => {
    it("read again, a processed file gives the identical answer; another partner, and the owner's other mode, still get the 404 of an unknown id (no-oracle guarantee 3)", async () => {
      const own = await sendFile(stack.baseUrl, p.token, p.elder, fixture("sample.txt"));
      expect(own.status).toBe(202);
      const id = own.json!.id as string;
      // The first read that sees it processed asks file-intake; the ones after are answered by the gateway.
      const first = await waitForStatus(stack.baseUrl, p.token, id, ["processed"]);
      const again = [
        await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`),
        await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`),
      ];
      expect(JSON.parse(first.text)).toEqual({ id, status: "processed" });
      for (const res of again) expect(comparable(res)).toEqual(comparable(first));

      const other = await connectedPartner(stack, "Curious Lab");
      const unknown = comparable(
        await call(stack.baseUrl, other.token, "GET", "/v1/files/file_0123456789ABCDEFGHIJab"),
      );
      expect(unknown.status).toBe(404);
      expect(comparable(await call(stack.baseUrl, other.token, "GET", `/v1/files/${id}`))).toEqual(unknown);
      expect(comparable(await call(stack.baseUrl, testToken, "GET", `/v1/files/${id}`))).toEqual(unknown);
      // And the owner still reads it.
      expect(comparable(await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`))).toEqual(comparable(first));
    });
  });
});

describe("auth no oracle: a stalled JWK Set host", () => {
  // A private_key_jwt credential registered with --jwks-url whose host answered once (at
  // registration) and then stalls: it accepts connections and never answers. No token request
  // waits on that host: its client's failures take the time of an unknown client's (guarantee 5),
  // and another partner's tokens are no slower beside them than beside an equal number of unknown
  // clients' failures.

  const TOKEN_ENDPOINT = "https://partners.example/oauth/token";
  let stack: TestStack;
  let jwksHost: Server;
  const heldSockets = new Set<Socket>();
  let stalledKey: Awaited<ReturnType<typeof partnerKey>>;
  let stalledClientId: string;
  let other: { clientId: string; clientSecret: string };
  const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });

  beforeAll(async () => {
    stack = await startTestStack({ ...NO_RATE_LIMITS, TOKEN_ENDPOINT_URL: TOKEN_ENDPOINT });
    const ops = opsFor(stack.settings);
    stalledKey = await partnerKey("ES384", "k1");
    let answered = 0;
    jwksHost = createServer((_req, res) => {
      if (answered++ === 0)
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(stalledKey.jwks));
      // Every later request is held: no status line, no body, the socket left open.
    });
    jwksHost.on("connection", (socket) => {
      heldSockets.add(socket);
      socket.on("close", () => heldSockets.delete(socket));
    });
    await new Promise<void>((r) => jwksHost.listen(0, "127.0.0.1", r));
    const url = `http://127.0.0.1:${(jwksHost.address() as AddressInfo).port}/.well-known/jwks.json`;
    const stalled = await ops.partnerCreate({ name: "Stalled Keys Lab" });
    stalledClientId = (await ops.credentialCreate(stalled.partner_id, "live", { jwksUrl: url })).client_id as string;
    expect(answered).toBe(1);
    const partner = await ops.partnerCreate({ name: "Unhurried Neighbour Pharmacy" });
    other = { clientId: partner.live.client_id, clientSecret: partner.live.client_secret };
  });
  afterAll(async () => {
    keepAlive.destroy();
    for (const socket of heldSockets) socket.destroy();
    jwksHost?.close();
    await stack?.stop();
  });

  function post(body: Record<string, string>, agent: Agent | false = false): Promise<{ status: number; ms: number }> {
    const text = new URLSearchParams(body).toString();
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const req = request(
        `${stack.baseUrl}/oauth/token`,
        {
          method: "POST",
          agent,
          headers: { "content-type": "application/x-www-form-urlencoded", "content-length": Buffer.byteLength(text) },
        },
        (res) => {
          res.resume();
          res.on("end", () => resolve({ status: res.statusCode!, ms: performance.now() - started }));
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(text);
    });
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const p99 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.ceil(xs.length * 0.99) - 1]!;

  type Kind = "unknown client" | "stalled host, unknown kid" | "stalled host, bad signature";
  const KINDS: Kind[] = ["unknown client", "stalled host, unknown kid", "stalled host, bad signature"];
  let stranger: Awaited<ReturnType<typeof partnerKey>>;
  async function failingAssertion(kind: Kind): Promise<string> {
    stranger ??= await partnerKey("ES384", "k1");
    if (kind === "unknown client") return stalledKey.assertion("cli_0000000000000000000000", TOKEN_ENDPOINT);
    // A kid the stored set lacks: asks for the set again, from the host that stalls.
    if (kind === "stalled host, unknown kid")
      return stalledKey.assertion(stalledClientId, TOKEN_ENDPOINT, { header: { kid: `k-${Math.random()}` } });
    return stranger.assertion(stalledClientId, TOKEN_ENDPOINT);
  }

  it("no-oracle guarantee 5: a client whose JWK Set host stalls fails in the time of an unknown client (medians over interleaved samples differ by less than 35% or 3 ms)", async () => {
    // As the guarantee 5 test above: interleaved in a random order each round, the bar met by one
    // of three independent measurements.
    const measure = async () => {
      const samples = Object.fromEntries(KINDS.map((k) => [k, [] as number[]])) as Record<Kind, number[]>;
      for (let round = -3; round < 30; round++) {
        for (const kind of [...KINDS].sort(() => Math.random() - 0.5)) {
          const body = assertionBody(await failingAssertion(kind));
          const { ms, status } = await post(body, keepAlive);
          expect({ kind, status }).toEqual({ kind, status: 400 });
          if (round >= 0) samples[kind].push(ms);
        }
      }
      return Object.fromEntries(KINDS.map((k) => [k, median(samples[k])])) as Record<Kind, number>;
    };
    const unequal = (m: Record<Kind, number>) =>
      KINDS.filter((k) => k !== "unknown client").filter((k) => {
        const diff = Math.abs(m[k] - m["unknown client"]);
        return !(diff < 3 || diff / Math.min(m[k], m["unknown client"]) < 0.35);
      });
    const attempts: { medians: Record<Kind, number>; unequal: Kind[] }[] = [];
    do {
      const medians = await measure();
      attempts.push({ medians, unequal: unequal(medians) });
    } while (attempts.at(-1)!.unequal.length > 0 && attempts.length < 3);
    process.stderr.write(
      `stalled JWK Set host, failure medians (ms), per attempt: ${JSON.stringify(attempts.map((a) => a.medians))}\n`,
    );
    expect(attempts.at(-1)!.unequal).toEqual([]);
    // The client's registered key still works: only a failure is judged without the host.
    const ok = await post(assertionBody(await stalledKey.assertion(stalledClientId, TOKEN_ENDPOINT)));
    expect(ok.status).toBe(200);
  }, 900_000);

  it("a stalled JWK Set host never delays another partner: its tokens' p99 beside the stalled client's failures is that beside unknown clients' failures (within 50% or 10 ms)", async () => {
    // Two floods of equal cost, four requests at a time: failures of an unknown client, and
    // failures of the client whose host stalls. Meanwhile the other partner asks for tokens one at a
    // time. The floods alternate in blocks, each drained before the next starts (so nothing of one
    // is in flight during the other), and drift falls on both alike. The other partner's requests
    // share the gateways, the IssueTokens batches and the auth replica with the stalled client's.
    // A p99 over 150 samples is noisier than a median, hence the wider bar.
    const FLOOD = 4;
    const body = { grant_type: "client_credentials", client_id: other.clientId, client_secret: other.clientSecret };
    const block = async (flood: Kind, into: number[]) => {
      let running = true;
      const flooders = Array.from({ length: FLOOD }, async () => {
        while (running) await post(assertionBody(await failingAssertion(flood)));
      });
      try {
        for (let i = 0; i < 12; i++) {
          const { ms, status } = await post(body, keepAlive);
          expect(status).toBe(200);
          // The first two while the flood gets going.
          if (i >= 2) into.push(ms);
        }
      } finally {
        running = false;
        await Promise.all(flooders);
      }
    };
    const measure = async () => {
      const beside: number[] = [];
      const besideStalled: number[] = [];
      for (let round = 0; round < 15; round++) {
        await block("unknown client", beside);
        await block("stalled host, unknown kid", besideStalled);
      }
      return { beside: p99(beside), besideStalled: p99(besideStalled) };
    };
    const slower = (m: { beside: number; besideStalled: number }) =>
      m.besideStalled - m.beside >= 10 && m.besideStalled / m.beside >= 1.5;
    const attempts: { beside: number; besideStalled: number }[] = [];
    do attempts.push(await measure());
    while (slower(attempts.at(-1)!) && attempts.length < 3);
    process.stderr.write(
      `another partner's token p99 (ms) beside unknown clients' / the stalled client's failures, per attempt: ${JSON.stringify(attempts)}\n`,
    );
    expect(slower(attempts.at(-1)!)).toBe(false);
  }, 1_800_000);
});
