import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomUUID } from "node:crypto";
import { clientsFor, type WebhookClient } from "@pi/common/rpc/clients";
import { connectMongo, databaseName, type Mongo } from "@pi/common/store/mongo";
import { ErrorReason, RpcError, reasonOf, Status } from "@pi/common/rpc/errors";
import { commonv1 } from "@pi/proto";
import { as } from "../../../test/support/services.js";
import { webhookEventDoc } from "../src/consumer.js";
import type { WebhookEventType as EventType } from "@pi/common/events/webhook-events";
import { sweepEvents } from "../src/retention.js";
import { STARTING_AFTER_UNKNOWN } from "../src/routes.js";
import { openWebhookStore, type WebhookEventDoc, type WebhookStore } from "../src/store.js";
import { startWebhookHarness, type WebhookHarness } from "./harness.js";

// ListEvents (GET /v1/events' half in the webhook service) and the retention sweep, on the
// MongoDB-wire server. Events are written straight into the store, already delivered, so the
// dispatcher leaves them alone and the sweep's clock can be set.

let h: WebhookHarness;
let mongo: Mongo;
let store: WebhookStore;
let gateway: WebhookClient;

beforeAll(async () => {
  h = await startWebhookHarness();
  mongo = await connectMongo(h.settings.MONGODB_URI, databaseName(h.settings.DATA_NAMESPACE, "webhook"));
  store = await openWebhookStore(mongo.db);
  gateway = clientsFor(as(h.settings, "gateway")).webhook();
});
afterAll(async () => {
  await mongo?.close();
  await h?.stop();
});

const DAY = 86_400_000;

function event(
  partnerId: string,
  opts: {
    mode?: "live" | "test";
    type?: EventType;
    createdAt?: Date;
    seq?: number;
    state?: WebhookEventDoc["state"];
  } = {},
): WebhookEventDoc {
  const type = opts.type ?? "connection.approved";
  const src = {
    ok: true as const,
    sourceEventId: randomUUID(),
    partnerId,
    connectionId: `con_${randomUUID().replace(/-/g, "")}`,
    type,
    status: type === "connection.approved" ? ("approved" as const) : ("revoked" as const),
    occurredAtMs: (opts.createdAt ?? new Date()).getTime(),
  };
  const doc = webhookEventDoc(src, opts.mode ?? "live", opts.createdAt ?? new Date(), opts.seq ?? 0);
  return { ...doc, state: opts.state ?? "delivered", nextAttemptAt: null };
}

const partner = () => `ptr_${randomUUID().replace(/-/g, "").slice(0, 22)}`;
const list = (
  partnerId: string,
  over: { mode?: commonv1.Mode; limit?: number; startingAfter?: string; type?: string } = {},
) => gateway.listEvents({ partnerId, mode: commonv1.Mode.LIVE, limit: 10, ...over });
const ids = (bodies: string[]) => bodies.map((b) => (JSON.parse(b) as { id: string }).id);

async function refusal(p: Promise<unknown>) {
  try {
    await p;
  } catch (err) {
    return { reason: reasonOf(err)?.reason, param: reasonOf(err)?.param, message: (err as RpcError).message };
  }
  throw new Error("expected a refusal");
}

describe("ListEvents", () => {
  it("lists the stored bodies byte for byte, newest first; events stored in one batch (one instant) in their Kafka order, across pages", async () => {
    const p = partner();
    const instant = new Date(Date.now() - 60_000);
    const batch = [10, 11, 12, 13, 14].map((seq) => event(p, { createdAt: instant, seq }));
    const later = event(p, { createdAt: new Date(instant.getTime() + 1), seq: 3 });
    await store.events.insertMany([...batch, later]);
    const expected = [later, ...[...batch].reverse()];

    const whole = await list(p, { limit: 100 });
    expect(whole.events).toEqual(expected.map((d) => d.body));
    expect(whole.hasMore).toBe(false);

    const seen: string[] = [];
    let after = "";
    for (let round = 0; round < 10; round++) {
      const page = await list(p, { limit: 2, startingAfter: after });
      seen.push(...ids(page.events));
      if (!page.hasMore) break;
      after = seen.at(-1)!;
    }
    expect(seen).toEqual(expected.map((d) => d._id));
  });

  it("a starting_after of another partner, of the other mode, unknown or malformed: the one INVALID_REQUEST on starting_after", async () => {
    const p = partner();
    const other = partner();
    const mine = event(p);
    const theirs = event(other);
    const testOne = event(p, { mode: "test" });
    await store.events.insertMany([mine, theirs, testOne]);
    expect((await list(p, { startingAfter: mine._id })).events).toEqual([]);
    const expected = { reason: ErrorReason.INVALID_REQUEST, param: "starting_after", message: STARTING_AFTER_UNKNOWN };
    expect(await refusal(list(p, { startingAfter: theirs._id }))).toEqual(expected);
    expect(await refusal(list(p, { startingAfter: testOne._id }))).toEqual(expected);
    expect(await refusal(list(p, { startingAfter: "evt_0000000000000000000000" }))).toEqual(expected);
    expect(await refusal(list(p, { startingAfter: "con_0000000000000000000000" }))).toEqual(expected);
  });

  it("keeps modes and partners apart and filters by type", async () => {
    const p = partner();
    const live = event(p, { type: "connection.approved" });
    const revoked = event(p, { type: "connection.revoked", createdAt: new Date(Date.now() + 1) });
    const test = event(p, { mode: "test" });
    await store.events.insertMany([live, revoked, test, event(partner())]);
    expect(ids((await list(p)).events)).toEqual([revoked._id, live._id]);
    expect(ids((await list(p, { mode: commonv1.Mode.TEST })).events)).toEqual([test._id]);
    expect(ids((await list(p, { type: "connection.revoked" })).events)).toEqual([revoked._id]);
  });

  it("refuses a request without a mode", async () => {
    await expect(list(partner(), { mode: commonv1.Mode.UNSPECIFIED })).rejects.toThrow(RpcError);
  });

  it("is the gateway's alone: the operator's identity is refused", async () => {
    const ops = clientsFor(as(h.settings, "ops")).webhook();
    await expect(ops.listEvents({ partnerId: partner(), mode: commonv1.Mode.LIVE, limit: 1 })).rejects.toMatchObject({
      code: Status.PERMISSION_DENIED,
    });
  });
});

describe("retention sweep (an injected clock)", () => {
  const policy = { keepMs: 30 * DAY, testPerPartner: 3 };

  it("deletes events stored more than 30 days ago, keeps younger ones, and never one still queued or with an audit record waiting", async () => {
    const p = partner();
    const now = new Date(Date.now() + 365 * DAY); // far enough ahead that only this test's events are young
    const old = event(p, { createdAt: new Date(now.getTime() - 30 * DAY - 1) });
    const oldFailed = event(p, { createdAt: new Date(now.getTime() - 40 * DAY), state: "no_endpoint" });
    const young = event(p, { createdAt: new Date(now.getTime() - 30 * DAY + 60_000) });
    const oldPending = event(p, { createdAt: new Date(now.getTime() - 40 * DAY), state: "pending" });
    const oldAudited = {
      ...event(p, { createdAt: new Date(now.getTime() - 40 * DAY) }),
      audit: [{ eventId: "aud_x" } as never],
    };
    await store.events.insertMany([old, oldFailed, young, oldPending, oldAudited]);
    await sweepEvents(store, policy, now);
    const left = new Set((await store.events.find({ partnerId: p }).toArray()).map((d) => d._id));
    expect(left).toEqual(new Set([young._id, oldPending._id, oldAudited._id]));
  });

  it("keeps only the newest test events of a partner past the bound; its live events and other partners' stay", async () => {
    const p = partner();
    const small = partner();
    const base = Date.now();
    const tests = Array.from({ length: 6 }, (_, i) => event(p, { mode: "test", createdAt: new Date(base + i) }));
    const lives = Array.from({ length: 5 }, (_, i) => event(p, { createdAt: new Date(base + i) }));
    const others = Array.from({ length: 3 }, (_, i) => event(small, { mode: "test", createdAt: new Date(base + i) }));
    await store.events.insertMany([...tests, ...lives, ...others]);
    await sweepEvents(store, policy, new Date(base));
    expect(ids((await list(p, { mode: commonv1.Mode.TEST, limit: 100 })).events)).toEqual(
      tests
        .slice(3)
        .reverse()
        .map((d) => d._id),
    );
    expect((await list(p, { limit: 100 })).events).toHaveLength(5);
    expect((await list(small, { mode: commonv1.Mode.TEST, limit: 100 })).events).toHaveLength(3);
  });
});
