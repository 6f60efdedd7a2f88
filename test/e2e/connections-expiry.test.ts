import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { collectConnectionEvents, settled, type EventCollector } from "../support/connection-events.js";

// Pending windows of 2 s and a sandbox delay of 4 s: expiry, computed on read and persisted by the
// sweep, and a sandbox connection that outlives the window because it waits for its approval.

const ttlSeconds = 2;
const delaySeconds = 4;
let stack: TestStack;
let events: EventCollector;
let mongo: MongoClient;
let ops: ReturnType<typeof opsFor>;
let live: string;
let test: string;
let sandbox: string;

const post = (token: string, elder: string) => call(stack.baseUrl, token, "POST", "/v1/connections", { elder });
const create = async (token: string, elder: string) => (await post(token, elder)).json!.id as string;
const get = (token: string, id: string) => call(stack.baseUrl, token, "GET", `/v1/connections/${id}`);
const statusOf = async (token: string, id: string) => (await get(token, id)).json!.status;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stored = (id: string) => mongo.db(databaseName(stack.settings.DATA_NAMESPACE, "connection")).collection("connections").findOne({ _id: id as never });
async function eventually<T>(read: () => Promise<T>, want: T, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (value === want || Date.now() > deadline) return value;
    await sleep(200);
  }
}

beforeAll(async () => {
  stack = await startTestStack({ CONNECTION_PENDING_TTL_SECONDS: String(ttlSeconds), SANDBOX_APPROVAL_DELAY_SECONDS: String(delaySeconds) });
  events = await collectConnectionEvents(stack.settings.KAFKA_BROKERS, stack.settings.DATA_NAMESPACE);
  mongo = await MongoClient.connect(stack.settings.MONGODB_URI);
  ops = opsFor(stack.settings);
  sandbox = (await ops.info()).sandbox_elder_address;
  const partner = await ops.partnerCreate({ name: "Pharmacy" });
  live = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
  test = await accessToken(stack.baseUrl, partner.test.client_id, partner.test.client_secret);
});

afterAll(async () => {
  await events?.stop();
  await mongo?.close();
  await stack?.stop();
});

describe("expiry (CONNECTION_PENDING_TTL_SECONDS=2)", () => {
  it("pending, declined and unresolvable connections read expired after the window, persisted by the sweep, without an event; the sandbox connection waits and approves", async () => {
    const pending = await create(live, (await ops.elderCreate()).address);
    const declined = await create(live, (await ops.elderCreate()).address);
    await ops.connectionAct("decline", declined);
    const unresolvable = await create(live, `never.registered.anywhere@${stack.settings.ADDRESS_DOMAIN}`);
    const all = [pending, declined, unresolvable];
    const requested = Date.now();
    const waiting = await create(test, sandbox);
    // The windows of the three started no later than `requested`.
    for (const id of all) expect(["pending", "expired"]).toContain(await statusOf(live, id));
    expect(await statusOf(test, waiting)).toBe("pending");

    await sleep(requested + ttlSeconds * 1000 + 300 - Date.now());
    // Guarantee 4 over time: the declined one expires exactly like the undecided one.
    const [a, b] = [await get(live, pending), await get(live, declined)];
    expect(a.json!.status).toBe("expired");
    expect(b.text.replace(declined, "")).toBe(a.text.replace(pending, ""));
    expect(await statusOf(live, unresolvable)).toBe("expired");
    // Not expired, whatever the window says: it waits for its approval.
    expect(await statusOf(test, waiting)).toBe("pending");

    for (const id of all) expect(await eventually(async () => (await stored(id))?.status, "expired")).toBe("expired");

    expect(await eventually(() => statusOf(test, waiting), "approved")).toBe("approved");
    const approvedAfter = Date.now() - requested;
    expect(approvedAfter).toBeGreaterThanOrEqual(delaySeconds * 1000);
    expect(approvedAfter).toBeLessThan((delaySeconds + 60) * 1000);
    await events.waitFor(() => events.of(waiting).length === 1);
    for (const id of all) expect(events.of(id)).toEqual([]);
  });

  it("an expired connection cannot be approved; a new request reopens it under the same id; DELETE reports revoked", async () => {
    const address = (await ops.elderCreate()).address;
    const id = await create(live, address);
    await sleep(ttlSeconds * 1000 + 300);
    expect(await statusOf(live, id)).toBe("expired");
    await expect(ops.connectionAct("approve", id)).rejects.toThrow(/expired/);

    const again = await post(live, address);
    expect(again.status).toBe(202);
    expect(again.json).toEqual({ id, status: "pending" });
    expect(await ops.connectionAct("approve", id)).toEqual({ id, internal_status: "approved" });
    expect(await statusOf(live, id)).toBe("approved");

    const other = await create(live, (await ops.elderCreate()).address);
    await sleep(ttlSeconds * 1000 + 300);
    const deleted = await call(stack.baseUrl, live, "DELETE", `/v1/connections/${other}`);
    expect(deleted.json).toEqual({ id: other, status: "revoked" });
    expect(await statusOf(live, other)).toBe("revoked");
    await settled(events, mongo.db(databaseName(stack.settings.DATA_NAMESPACE, "connection")).collection("connections"), other);
    expect(events.of(other)).toEqual([]);
  });
});
