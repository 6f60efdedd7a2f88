import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createServer, type Server } from "node:http";
import { verifyWebhook } from "../../../test/support/webhook-receiver.js";
import { eventually, startWebhookHarness, type WebhookHarness } from "./harness.js";

// Signing-secret rotation, resend, recover, Retry-After, every attempt kept, endpoint health: the
// operator's webhook tools end to end through Kafka, the real database and a receiver on loopback.
// Window 20 s (the last attempt starts 17 s in), so "failed" comes quickly; failing period 0.83 s.

interface Hit {
  header: string;
  raw: Buffer;
  at: number;
  /** When the answer was sent. */
  answeredAt: number;
}
type Answer = { status: number; headers?: Record<string, string>; body?: string };

/** A receiver that keeps each request's raw body and Service-Signature header, and answers as told. */
async function rawReceiver(answer: (hit: Hit, n: number) => Answer = () => ({ status: 204 })) {
  const hits: Hit[] = [];
  let decide = answer;
  const server: Server = createServer((req, res) => {
    const at = Date.now();
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const hit: Hit = {
        header: String(req.headers["service-signature"] ?? ""),
        raw: Buffer.concat(chunks),
        at,
        answeredAt: 0,
      };
      const a = decide(hit, hits.length + 1);
      hit.answeredAt = Date.now();
      hits.push(hit);
      res.writeHead(a.status, a.headers).end(a.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hooks`,
    hits,
    answer(a: typeof answer) {
      decide = a;
    },
    idsOf: () => hits.map((h) => (JSON.parse(h.raw.toString()) as { id: string }).id),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
type Receiver = Awaited<ReturnType<typeof rawReceiver>>;

const verifies = (hit: Hit, secret: string) => {
  try {
    verifyWebhook(hit.raw, hit.header, secret);
    return true;
  } catch {
    return false;
  }
};
const v1Count = (header: string) => header.split(",").filter((p) => p.startsWith("v1=")).length;

let h: WebhookHarness;
const receivers: Receiver[] = [];
beforeAll(async () => {
  h = await startWebhookHarness({ WEBHOOK_RETRY_WINDOW_SECONDS: "20" });
});
afterAll(async () => {
  await Promise.all(receivers.map((r) => r.close()));
  await h?.stop();
});

async function partnerWith(name: string, answer?: (hit: Hit, n: number) => Answer) {
  const receiver = await rawReceiver(answer);
  receivers.push(receiver);
  const partner = await h.ops.partnerCreate({ name, webhookUrl: receiver.url });
  return { receiver, partner };
}

async function deliveryOf(partnerId: string, eventId: string) {
  const { deliveries } = await h.ops.webhookDeliveries(partnerId);
  return deliveries.find((d) => d.event_id === eventId);
}

async function emitAndStore(partnerId: string) {
  const source = await h.emit({ partnerId });
  const [event] = await eventually(
    async () => {
      const stored = (await h.stored(partnerId)).filter((e) => e.sourceEventId === source.eventId);
      return stored.length ? stored : undefined;
    },
    20_000,
    "the stored event",
  );
  return event!;
}

describe("webhook signing-secret rotation", () => {
  it("during the overlap each delivery carries a v1 per valid secret and verifies with the old or the new one; afterwards only the new one", async () => {
    const { receiver, partner } = await partnerWith("Rotating Pharmacy");
    const oldSecret = partner.signing_secret;

    const before = await emitAndStore(partner.partner_id);
    await eventually(
      async () => (receiver.idsOf().includes(before._id) ? true : undefined),
      20_000,
      "the first delivery",
    );
    const first = receiver.hits.at(-1)!;
    expect(v1Count(first.header)).toBe(1);
    expect(verifies(first, oldSecret)).toBe(true);

    const overlapSeconds = 6;
    const rotated = await h.ops.partnerRotateSigningSecret(partner.partner_id, String(overlapSeconds / 3600));
    const newSecret = rotated.signing_secret;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(oldSecret);
    const overlapEnds = Date.parse(rotated.previous_expires_at);
    expect(overlapEnds).toBeGreaterThan(Date.now());

    const during = await emitAndStore(partner.partner_id);
    await eventually(
      async () => (receiver.idsOf().includes(during._id) ? true : undefined),
      20_000,
      "a delivery during the overlap",
    );
    const overlapped = receiver.hits.find((x) => x.raw.toString() === during.body)!;
    expect(overlapped.at).toBeLessThan(overlapEnds);
    expect(overlapped.header).toMatch(/^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
    expect(verifies(overlapped, oldSecret)).toBe(true);
    expect(verifies(overlapped, newSecret)).toBe(true);

    // Once the overlap is over (waiting for a known time, not for nothing to happen):
    await new Promise((r) => setTimeout(r, Math.max(0, overlapEnds - Date.now() + 100)));
    const after = await emitAndStore(partner.partner_id);
    await eventually(
      async () => (receiver.idsOf().includes(after._id) ? true : undefined),
      20_000,
      "a delivery after the overlap",
    );
    const last = receiver.hits.find((x) => x.raw.toString() === after.body)!;
    expect(v1Count(last.header)).toBe(1);
    expect(verifies(last, newSecret)).toBe(true);
    expect(verifies(last, oldSecret)).toBe(false);
  }, 90_000);

  it("the new secret is stored sealed, never in the clear", async () => {
    const { partner } = await partnerWith("Sealed Secrets Lab");
    const { signing_secret } = await h.ops.partnerRotateSigningSecret(partner.partner_id, "1");
    const { MongoClient } = await import("mongodb");
    const { databaseName } = await import("@pi/common/store/mongo");
    const client = await MongoClient.connect(h.settings.MONGODB_URI);
    try {
      const doc = await client
        .db(databaseName(h.settings.DATA_NAMESPACE, "auth"))
        .collection("partners")
        .findOne({ _id: partner.partner_id as never });
      const stored = JSON.stringify(doc);
      expect(stored).not.toContain(signing_secret);
      expect(stored).not.toContain(partner.signing_secret);
      expect((doc as unknown as { previousSigningSecrets: unknown[] }).previousSigningSecrets).toHaveLength(1);
    } finally {
      await client.close();
    }
  });

  it("a bad overlap is refused with one line", async () => {
    const { partner } = await partnerWith("Bad Overlap Clinic");
    await expect(h.ops.partnerRotateSigningSecret(partner.partner_id, "-1")).rejects.toThrow(/overlap-hours/);
    await expect(h.ops.partnerRotateSigningSecret(partner.partner_id, "many")).rejects.toThrow(/overlap-hours/);
  });
});

describe("webhook resend", () => {
  it("sends the stored event again: same evt_ id and body, a fresh signature", async () => {
    const { receiver, partner } = await partnerWith("Resend Lab");
    const event = await emitAndStore(partner.partner_id);
    await eventually(
      async () => ((await deliveryOf(partner.partner_id, event._id))?.state === "delivered" ? true : undefined),
      20_000,
      "delivered",
    );
    const firstHit = receiver.hits.at(-1)!;
    await new Promise((r) => setTimeout(r, 1100)); // a later second, so the fresh t differs
    const resent = await h.ops.webhookResend(event._id);
    expect(resent).toEqual({ event_id: event._id, state: "pending", attempts: 1 });
    await eventually(async () => (receiver.hits.length === 2 ? true : undefined), 20_000, "the resent delivery");
    const again = receiver.hits[1]!;
    expect(again.raw.equals(firstHit.raw)).toBe(true);
    expect(again.header).not.toBe(firstHit.header);
    expect(verifies(again, partner.signing_secret)).toBe(true);
    const attempts = await eventually(
      async () => {
        const a = await h.ops.webhookAttempts(event._id);
        return a.attempts.length === 2 ? a : undefined;
      },
      20_000,
      "the second attempt stored",
    );
    expect(attempts.attempts.map((a) => a.number)).toEqual([1, 2]);
    expect(attempts.state).toBe("delivered");
  });

  it("an unknown or malformed event id is refused", async () => {
    await expect(h.ops.webhookResend("evt_doesnotexist")).rejects.toThrow(/no webhook event/);
    await expect(h.ops.webhookResend("con_x")).rejects.toThrow(/evt_/);
  });
});

describe("webhook recover, attempts and endpoint health", () => {
  it("a receiver answering 503 with Retry-After: 7 sees its next attempt no sooner than 7 s later; every attempt is kept with the first 1 KiB of the reply", async () => {
    const { receiver, partner } = await partnerWith("Busy Lab", (_hit, n) =>
      n === 1 ? { status: 503, headers: { "retry-after": "7" }, body: "b".repeat(3000) } : { status: 204 },
    );
    const event = await emitAndStore(partner.partner_id);
    await eventually(
      async () => (receiver.hits.length >= 2 ? true : undefined),
      30_000,
      "the attempt after Retry-After",
    );
    const [busy, next] = receiver.hits;
    process.stderr.write(
      `Retry-After: 7 -> next attempt ${next!.at - busy!.answeredAt} ms after the 503 was answered\n`,
    );
    expect(next!.at - busy!.answeredAt).toBeGreaterThanOrEqual(7_000);
    // The second attempt's outcome is stored just after the receiver answered it.
    await eventually(
      async () => ((await deliveryOf(partner.partner_id, event._id))?.state === "delivered" ? true : undefined),
      20_000,
      "delivered",
    );
    const attempts = await h.ops.webhookAttempts(event._id);
    expect(attempts.attempts).toHaveLength(2);
    expect(attempts.attempts[0]).toMatchObject({ number: 1, status: 503, error: null });
    expect(attempts.attempts[0]!.response_excerpt).toBe("b".repeat(1024));
    expect(attempts.attempts[0]!.duration_ms).toBeGreaterThanOrEqual(0);
    expect(Number.isNaN(Date.parse(attempts.attempts[0]!.started_at))).toBe(false);
    expect(attempts.attempts[1]).toMatchObject({ number: 2, status: 204 });
    expect(attempts.state).toBe("delivered");
  }, 60_000);

  it("a Retry-After past the window's last start ends the delivery as failed instead of sending early", async () => {
    const { receiver, partner } = await partnerWith("Closed Lab", () => ({
      status: 429,
      headers: { "retry-after": "3600" },
    }));
    const event = await emitAndStore(partner.partner_id);
    await eventually(
      async () => ((await deliveryOf(partner.partner_id, event._id))?.state === "failed" ? true : undefined),
      20_000,
      "failed",
    );
    expect(receiver.hits).toHaveLength(1);
  });

  it("recover re-queues only what failed since the given time; a partner whose attempts all fail shows as failing, and recovers", async () => {
    const { receiver, partner } = await partnerWith("Flaky Clinic", () => ({ status: 500, body: "down" }));
    const older = await emitAndStore(partner.partner_id);
    await eventually(
      async () => ((await deliveryOf(partner.partner_id, older._id))?.state === "failed" ? true : undefined),
      30_000,
      "the older event failed",
    );
    const listed = await h.ops.webhookDeliveries(partner.partner_id);
    expect(listed.endpoint.state).toBe("failing");
    expect(listed.endpoint.failing_since).not.toBeNull();

    const since = new Date().toISOString();
    const newer = await emitAndStore(partner.partner_id);
    await eventually(
      async () => ((await deliveryOf(partner.partner_id, newer._id))?.state === "failed" ? true : undefined),
      30_000,
      "the newer event failed",
    );
    const hitsBefore = receiver.hits.length;

    receiver.answer(() => ({ status: 204 }));
    const recovered = await h.ops.webhookRecover(partner.partner_id, since);
    expect(recovered).toEqual({ partner_id: partner.partner_id, requeued: 1, event_ids: [newer._id] });
    await eventually(
      async () => ((await deliveryOf(partner.partner_id, newer._id))?.state === "delivered" ? true : undefined),
      20_000,
      "recovered and delivered",
    );
    const redelivered = receiver.hits.slice(hitsBefore);
    expect(redelivered.map((x) => x.raw.toString())).toEqual([newer.body]);
    expect((await deliveryOf(partner.partner_id, older._id))?.state).toBe("failed");
    const health = await h.ops.webhookDeliveries(partner.partner_id);
    expect(health.endpoint).toMatchObject({ state: "ok", failing_since: null });
    expect(health.endpoint.last_success_at).not.toBeNull();
  }, 90_000);

  it("recover refuses a time without a zone", async () => {
    await expect(h.ops.webhookRecover("ptr_x", "2026-01-01 12:00")).rejects.toThrow(/ISO 8601/);
  });
});
