import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { clientsFor } from "@pi/common/rpc/clients";
import { webhookv1 } from "@pi/proto";
import { startTestReceiver, type TestReceiver } from "../../../test/support/webhook-receiver.js";
import { eventually, startWebhookHarness, type WebhookHarness } from "./harness.js";

// The webhook service on real Kafka and the MongoDB-wire server, fed connection events by a producer, delivering
// to real HTTP receivers on 127.0.0.1 that verify every signature with the documented receiver.

let h: WebhookHarness;
const receivers: TestReceiver[] = [];

async function partnerWithReceiver(name: string, behaviour?: Parameters<typeof startTestReceiver>[1]) {
  // The signing secret exists only once the partner does, so the address is registered after.
  const partner = await h.ops.partnerCreate({ name });
  const receiver = await startTestReceiver(partner.signing_secret, behaviour);
  receivers.push(receiver);
  await h.ops.partnerSetWebhook(partner.partner_id, receiver.url);
  return { partner, receiver };
}

beforeAll(async () => {
  h = await startWebhookHarness();
});
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.close()));
  await h?.stop();
});

describe("webhook delivery", () => {
  it("approve and revoke events arrive signed, verifiable, with exactly the webhook event fields", async () => {
    const { partner, receiver } = await partnerWithReceiver("Signed Pharmacy");
    const approved = await h.emit({
      partnerId: partner.partner_id,
      type: "connection.approved",
      status: "approved",
      occurredAt: 1_800_000_000_500n,
    });
    const revoked = await h.emit({
      partnerId: partner.partner_id,
      connectionId: approved.connectionId,
      type: "connection.revoked",
      status: "revoked",
    });
    await receiver.waitFor((a) => a.length >= 2, 20_000, "both events");

    expect(receiver.rejected).toEqual([]);
    const byType = Object.fromEntries(receiver.arrivals.map((a) => [a.event.type, a]));
    expect(byType["connection.approved"]!.event).toEqual({
      id: expect.stringMatching(/^evt_[0-9A-Za-z]{22}$/),
      type: "connection.approved",
      created: 1_800_000_000,
      data: { connection_id: approved.connectionId, status: "approved" },
    });
    expect(byType["connection.revoked"]!.event).toEqual({
      id: expect.stringMatching(/^evt_/),
      type: "connection.revoked",
      created: Math.floor(Number(revoked.occurredAt) / 1000),
      data: { connection_id: approved.connectionId, status: "revoked" },
    });
    expect(byType["connection.approved"]!.event.id).not.toBe(byType["connection.revoked"]!.event.id);

    const deliveries = await eventually(
      async () => {
        const d = (await h.ops.webhookDeliveries(partner.partner_id)).deliveries;
        return d.length === 2 && d.every((x) => x.state === "delivered") ? d : undefined;
      },
      10_000,
      "deliveries recorded",
    );
    expect(deliveries.map((d) => d.attempts)).toEqual([1, 1]);
    expect(deliveries.map((d) => d.next_attempt_at)).toEqual([null, null]);
    expect(new Set(deliveries.map((d) => d.event_id))).toEqual(new Set(receiver.arrivals.map((a) => a.event.id)));
  });

  it("a receiver that fails the first attempts gets the same evt_ id and identical body again until it answers 2xx", async () => {
    const { partner, receiver } = await partnerWithReceiver("Flaky Clinic", (_e, nth) => (nth <= 3 ? "fail" : "ok"));
    await h.emit({ partnerId: partner.partner_id });
    await receiver.waitFor((a) => a.some((x) => x.outcome === "ok"), 30_000, "a successful attempt");

    expect(receiver.arrivals.map((a) => a.outcome)).toEqual(["fail", "fail", "fail", "ok"]);
    expect(new Set(receiver.arrivals.map((a) => a.event.id)).size).toBe(1);
    expect(new Set(receiver.arrivals.map((a) => a.raw)).size).toBe(1);
    // Backoff: each wait at least the base (0.2 s) less jitter, and growing.
    const gaps = receiver.arrivals.slice(1).map((a, i) => a.at - receiver.arrivals[i]!.at);
    expect(gaps[0]).toBeGreaterThanOrEqual(150);
    expect(gaps[2]!).toBeGreaterThan(gaps[0]!);

    const [doc] = await eventually(async () => {
      const docs = await h.stored(partner.partner_id);
      return docs[0]?.state === "delivered" ? docs : undefined;
    });
    expect(doc!.attempts).toBe(4);
    expect(doc!.attemptLog.map((a) => a.statusCode)).toEqual([500, 500, 500, 204]);
    expect(doc!.attemptLog.map((a) => a.number)).toEqual([1, 2, 3, 4]);
    for (const a of doc!.attemptLog) {
      expect(a.startedAt).toBeInstanceOf(Date);
      expect(a.durationMs).toBeGreaterThanOrEqual(0);
    }
    expect(doc!.body).toBe(receiver.arrivals[0]!.raw);
  });

  it("a redelivered Kafka message makes no second evt_ id", async () => {
    const { partner, receiver } = await partnerWithReceiver("Twice Told Lab");
    const first = await h.emit({ partnerId: partner.partner_id });
    await h.emit({
      partnerId: partner.partner_id,
      eventId: first.eventId,
      connectionId: first.connectionId,
      occurredAt: first.occurredAt,
    });
    await h.emit({
      partnerId: partner.partner_id,
      eventId: first.eventId,
      connectionId: first.connectionId,
      occurredAt: first.occurredAt,
    });
    // Same key, same partition: once this one arrives, the copies before it were consumed.
    const sentinel = await h.emit({ partnerId: partner.partner_id });
    await receiver.waitFor(
      (a) => a.some((x) => x.event.data.connection_id === sentinel.connectionId),
      20_000,
      "the sentinel",
    );
    // Every stored event has had its delivery, so a second copy's would have arrived by now.
    await eventually(async () =>
      (await h.stored(partner.partner_id)).every((d) => d.state === "delivered") ? true : undefined,
    );

    const docs = await h.stored(partner.partner_id);
    expect(docs.filter((d) => d.sourceEventId === first.eventId)).toHaveLength(1);
    expect(docs).toHaveLength(2);
    expect(receiver.arrivals.filter((a) => a.event.data.connection_id === first.connectionId)).toHaveLength(1);
  });

  it("a partner without a webhook address: the event is stored, marked no_endpoint, never sent, and reads as failed with 0 attempts", async () => {
    const partner = await h.ops.partnerCreate({ name: "Quiet Clinic" });
    await h.emit({ partnerId: partner.partner_id });
    const [doc] = await eventually(async () => {
      const docs = await h.stored(partner.partner_id);
      return docs[0]?.state === "no_endpoint" ? docs : undefined;
    });
    expect(doc).toMatchObject({ attempts: 0, nextAttemptAt: null, attemptLog: [] });
    const listed = await clientsFor(h.settings).webhookAdmin().listDeliveries({ partnerId: partner.partner_id });
    expect(listed.deliveries.map((d) => d.state)).toEqual([webhookv1.DeliveryState.NO_ENDPOINT]);
    expect(await h.ops.webhookDeliveries(partner.partner_id)).toEqual({
      deliveries: [
        { event_id: doc!._id, type: "connection.approved", attempts: 0, state: "failed", next_attempt_at: null },
      ],
      endpoint: { state: "ok", failing_since: null, last_success_at: null },
    });
  });

  it("a changed webhook address is used from the next attempt on, with the same evt_ id", async () => {
    const { partner, receiver: old } = await partnerWithReceiver("Moving Pharmacy", () => "fail");
    const next = await startTestReceiver(partner.signing_secret);
    receivers.push(next);
    await h.emit({ partnerId: partner.partner_id });
    await old.waitFor((a) => a.length >= 1, 20_000, "a first attempt at the old address");
    await h.ops.partnerSetWebhook(partner.partner_id, next.url);
    // Each attempt asks auth where to send: no cached address outlives the change.
    await next.waitFor((a) => a.length >= 1, 15_000, "an attempt at the new address");
    expect(next.arrivals[0]!.event.id).toBe(old.arrivals[0]!.event.id);
    expect(next.arrivals[0]!.raw).toBe(old.arrivals[0]!.raw);
  });

  it("keeps retrying a failing endpoint until WEBHOOK_RETRY_WINDOW_SECONDS is used up, then marks it failed", async () => {
    const short = await startWebhookHarness({ WEBHOOK_RETRY_WINDOW_SECONDS: "3" });
    try {
      const partner = await short.ops.partnerCreate({ name: "Broken Lab" });
      const receiver = await startTestReceiver(partner.signing_secret, () => "fail");
      receivers.push(receiver);
      await short.ops.partnerSetWebhook(partner.partner_id, receiver.url);
      await short.emit({ partnerId: partner.partner_id });
      const [doc] = await eventually(
        async () => {
          const docs = await short.stored(partner.partner_id);
          return docs[0]?.state === "failed" ? docs : undefined;
        },
        20_000,
        "the event to fail",
      );
      expect(doc!.attempts).toBeGreaterThanOrEqual(3);
      expect(doc!.attemptLog).toHaveLength(doc!.attempts);
      expect(receiver.arrivals).toHaveLength(doc!.attempts);
      for (const a of doc!.attemptLog) {
        expect(a.statusCode).toBe(500);
        expect(a.startedAt.getTime() - doc!.createdAt.getTime()).toBeLessThanOrEqual(3000);
      }
      expect((await short.ops.webhookDeliveries(partner.partner_id)).deliveries[0]).toMatchObject({
        state: "failed",
        next_attempt_at: null,
      });
    } finally {
      await short.stop();
    }
  });

  it("several replicas never deliver the same attempt twice", async () => {
    const { partner, receiver } = await partnerWithReceiver("Busy Pharmacy");
    await h.startReplica();
    const n = 40;
    await Promise.all(Array.from({ length: n }, () => h.emit({ partnerId: partner.partner_id })));
    await receiver.waitFor((a) => new Set(a.map((x) => x.event.id)).size >= n, 30_000, `${n} events`);
    const docs = await eventually(async () => {
      const d = await h.stored(partner.partner_id);
      return d.length === n && d.every((x) => x.state === "delivered") ? d : undefined;
    });
    // Sentinel: one more event, emitted once all n were delivered, has arrived after them; a second
    // attempt of any of them would have gone out in the rounds before.
    const sentinel = await h.emit({ partnerId: partner.partner_id });
    await receiver.waitFor(
      (a) => a.some((x) => x.event.data.connection_id === sentinel.connectionId),
      20_000,
      "the sentinel",
    );
    expect(receiver.arrivals.filter((x) => x.event.data.connection_id !== sentinel.connectionId)).toHaveLength(n);
    expect(receiver.arrivals.every((a) => a.nth === 1)).toBe(true);
    expect(docs.every((d) => d.attempts === 1)).toBe(true);
  });

  it("ListDeliveries refuses a missing partner id and a bad limit, and lists newest first", async () => {
    const client = clientsFor(h.settings).webhookAdmin();
    await expect(client.listDeliveries({ partnerId: "" })).rejects.toMatchObject({ code: Status.INVALID_ARGUMENT });
    await expect(client.listDeliveries({ partnerId: "ptr_x", limit: -1 })).rejects.toBeInstanceOf(RpcError);
    await expect(client.listDeliveries({ partnerId: "ptr_x", limit: 1001 })).rejects.toMatchObject({
      code: Status.INVALID_ARGUMENT,
    });
    expect((await client.listDeliveries({ partnerId: "ptr_unknown" })).deliveries).toEqual([]);

    const { partner, receiver } = await partnerWithReceiver("Ordered Lab");
    const a = await h.emit({ partnerId: partner.partner_id });
    await receiver.waitFor((x) => x.length >= 1);
    const b = await h.emit({ partnerId: partner.partner_id });
    await receiver.waitFor((x) => x.length >= 2);
    const listed = await eventually(async () => {
      const l = await client.listDeliveries({ partnerId: partner.partner_id });
      return l.deliveries.every((d) => d.state === webhookv1.DeliveryState.DELIVERED) ? l : undefined;
    });
    expect(listed.deliveries.map((d) => d.connectionId)).toEqual([b.connectionId, a.connectionId]);
    expect((await client.listDeliveries({ partnerId: partner.partner_id, limit: 1 })).deliveries).toHaveLength(1);
    expect(listed.deliveries[0]!.attemptLog[0]).toMatchObject({ number: 1, statusCode: 204, error: "" });
  });
});

describe("outbound safety (WEBHOOK_ALLOW_INSECURE_URLS=false)", () => {
  it("refuses a registered https address whose name resolves to loopback or private addresses at delivery time; the receiver never hears of it", async () => {
    const dns: Record<string, string[]> = {
      "hooks.rebinding.test": ["127.0.0.1"],
      "hooks.private.test": ["10.0.0.8", "fd00::8"],
    };
    const safe = await startWebhookHarness(
      { WEBHOOK_ALLOW_INSECURE_URLS: "false", WEBHOOK_RETRY_WINDOW_SECONDS: "2" },
      {
        resolve: (hostname, _o, cb) =>
          dns[hostname]
            ? cb(
                null,
                dns[hostname]!.map((address) => ({ address, family: address.includes(":") ? 6 : 4 })),
              )
            : cb(Object.assign(new Error("ENOTFOUND"), { code: "ENOTFOUND" }), []),
      },
    );
    try {
      const partner = await safe.ops.partnerCreate({ name: "Rebinding Lab" });
      const receiver = await startTestReceiver(partner.signing_secret);
      receivers.push(receiver);
      const port = new URL(receiver.url).port;
      // Registration only checks the shape (https, a name); where it resolves is checked on connect.
      await expect(safe.ops.partnerSetWebhook(partner.partner_id, `http://127.0.0.1:${port}/webhooks`)).rejects.toThrow(
        /https/,
      );
      await safe.ops.partnerSetWebhook(partner.partner_id, `https://hooks.rebinding.test:${port}/webhooks`);
      await safe.emit({ partnerId: partner.partner_id });
      const other = await safe.ops.partnerCreate({
        name: "Private Clinic",
        webhookUrl: `https://hooks.private.test:${port}/webhooks`,
      });
      await safe.emit({ partnerId: other.partner_id });

      for (const [id, name] of [
        [partner.partner_id, "hooks.rebinding.test"],
        [other.partner_id, "hooks.private.test"],
      ] as const) {
        const [doc] = await eventually(
          async () => {
            const docs = await safe.stored(id);
            return docs[0]?.state === "failed" ? docs : undefined;
          },
          20_000,
          `${name} to fail`,
        );
        expect(doc!.attemptLog.length).toBeGreaterThanOrEqual(2);
        for (const a of doc!.attemptLog) {
          expect(a.statusCode).toBe(0);
          expect(a.error).toMatch(new RegExp(`^refused: ${name.replace(/\./g, "\\.")} resolves to no public address`));
        }
      }
      expect(receiver.arrivals).toEqual([]);
      expect(receiver.rejected).toEqual([]);
    } finally {
      await safe.stop();
    }
  });
});
