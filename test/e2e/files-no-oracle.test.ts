import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { CONNECTION_REFUSAL_MS } from "../../services/file-intake/src/no-oracle.js";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { connectedPartner, fixture, sendFile, waitForStatus, type ConnectedPartner, type Response } from "../support/files.js";

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
    const connect = async (token: string, elder: string) => (await call(stack.baseUrl, token, "POST", "/v1/connections", { elder })).json!.id as string;

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
    for (const [name, token, elder] of cases) responses.push({ name, ...comparable(await sendFile(stack.baseUrl, token, elder, bytes, { purpose: "care_note" })) });
    const [first] = responses;
    expect(first!.status).toBe(403);
    expect(JSON.parse(first!.body)).toEqual({
      error: { type: "permission_error", code: "no_active_connection", message: "There is no active connection to this elder." },
    });
    for (const r of responses) expect({ name: r.name, status: r.status, headers: r.headers, body: r.body }).toEqual({ ...first, name: r.name });
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
    const medians = [...offsets.entries()].map(([name, xs]) => ({ name, offset: median(xs), ms: median(times.get(name)!) }));
    const spread = Math.max(...medians.map((m) => m.offset)) - Math.min(...medians.map((m) => m.offset));
    const summary = JSON.stringify(medians.map((m) => `${m.name}: ${m.ms.toFixed(1)} ms (${m.offset >= 0 ? "+" : ""}${m.offset.toFixed(1)})`));
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
    for (const [name, token, id] of ids) responses.push({ name, ...comparable(await call(stack.baseUrl, token, "GET", `/v1/files/${id}`)) });
    const [first] = responses;
    expect(first!.status).toBe(404);
    expect(JSON.parse(first!.body)).toEqual({ error: { type: "invalid_request_error", code: "not_found", message: "No such resource." } });
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
    const again = [await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`), await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`)];
    expect(JSON.parse(first.text)).toEqual({ id, status: "processed" });
    for (const res of again) expect(comparable(res)).toEqual(comparable(first));

    const other = await connectedPartner(stack, "Curious Lab");
    const unknown = comparable(await call(stack.baseUrl, other.token, "GET", "/v1/files/file_0123456789ABCDEFGHIJab"));
    expect(unknown.status).toBe(404);
    expect(comparable(await call(stack.baseUrl, other.token, "GET", `/v1/files/${id}`))).toEqual(unknown);
    expect(comparable(await call(stack.baseUrl, testToken, "GET", `/v1/files/${id}`))).toEqual(unknown);
    // And the owner still reads it.
    expect(comparable(await call(stack.baseUrl, p.token, "GET", `/v1/files/${id}`))).toEqual(comparable(first));
  });
});
