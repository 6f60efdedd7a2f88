import { describe, expect, it } from "@jest/globals";
import { create } from "@bufbuild/protobuf";
import { createHmac } from "node:crypto";
import { commonv1, eventsv1 } from "@pi/proto";
import { checkSourceEvent, webhookBody, webhookEventId } from "../src/event-body.js";
import { signatureHeader } from "../src/signature.js";
import { verifyWebhook } from "../../../test/support/webhook-receiver.js";

const source = (over: Partial<eventsv1.ConnectionEvent> = {}) =>
  create(eventsv1.ConnectionEventSchema, {
    eventId: "src-1",
    type: "connection.approved",
    partnerId: "ptr_1",
    connectionId: "con_1",
    status: "approved",
    mode: commonv1.Mode.LIVE,
    occurredAt: 1_700_000_000_123n,
    ...over,
  });

describe("webhook event body", () => {
  it("has exactly id, type, created and data {connection_id, status}", () => {
    const body = webhookBody("evt_abc", {
      type: "connection.approved",
      occurredAtMs: 1_700_000_000_999,
      connectionId: "con_1",
      status: "approved",
    });
    expect(body).toBe(
      '{"id":"evt_abc","type":"connection.approved","created":1700000000,"data":{"connection_id":"con_1","status":"approved"}}',
    );
    const parsed = JSON.parse(body) as Record<string, unknown>;
    expect(Object.keys(parsed)).toEqual(["id", "type", "created", "data"]);
    expect(Object.keys(parsed.data as object)).toEqual(["connection_id", "status"]);
  });

  it("one connection event makes one evt_ id, however often it is seen; different events make different ids", () => {
    const id = webhookEventId("2b6f0c1e-0000-4000-8000-000000000001");
    expect(id).toMatch(/^evt_[0-9A-Za-z]{22}$/);
    expect(webhookEventId("2b6f0c1e-0000-4000-8000-000000000001")).toBe(id);
    const ids = new Set(Array.from({ length: 1000 }, (_, i) => webhookEventId(`source-${i}`)));
    expect(ids.size).toBe(1000);
    expect(ids.has(id)).toBe(false);
  });

  it("takes created from the state change, in Unix seconds", () => {
    const src = checkSourceEvent(source(), 5);
    expect(src).toMatchObject({ ok: true, occurredAtMs: 1_700_000_000_123 });
  });

  it("uses the time it is stored when the connection event has no time", () => {
    expect(checkSourceEvent(source({ occurredAt: 0n }), 42_000)).toMatchObject({ ok: true, occurredAtMs: 42_000 });
  });

  it.each([
    ["connection.approved", "approved"],
    ["connection.revoked", "revoked"],
  ])("a %s event carries data.status %s", (type, status) => {
    expect(checkSourceEvent(source({ type, status }), 0)).toMatchObject({ ok: true, type, status });
  });

  it("data.status follows the type when the source disagrees", () => {
    expect(checkSourceEvent(source({ type: "connection.revoked", status: "approved" }), 0)).toMatchObject({
      ok: true,
      status: "revoked",
    });
    expect(checkSourceEvent(source({ status: "" }), 0)).toMatchObject({ ok: true, status: "approved" });
  });

  it.each([
    [{ type: "connection.declined" }, /not a webhook event type/],
    [{ type: "connection.expired" }, /not a webhook event type/],
    [{ type: "" }, /not a webhook event type/],
    [{ eventId: "" }, /event_id/],
    [{ partnerId: "" }, /partner_id/],
    [{ connectionId: "" }, /connection_id/],
    [{ connectionId: "file_1" }, /connection_id/],
  ])("refuses a source event %j", (over, reason) => {
    const res = checkSourceEvent(source(over as Partial<eventsv1.ConnectionEvent>), 0);
    expect(res.ok).toBe(false);
    expect(!res.ok && res.reason).toMatch(reason);
  });
});

describe("Service-Signature", () => {
  const secret = "whsec_test";
  const body = webhookBody("evt_abc", {
    type: "connection.revoked",
    occurredAtMs: 1_700_000_000_000,
    connectionId: "con_9",
    status: "revoked",
  });

  it("is t=<unix>,v1=<lowercase hex HMAC-SHA256 of {t}.{raw_body}>", () => {
    const header = signatureHeader([secret], 1_700_000_100, body);
    const expected = createHmac("sha256", secret).update(`1700000100.${body}`).digest("hex");
    expect(header).toBe(`t=1700000100,v1=${expected}`);
    expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
  });

  it("verifies with the documented receiver", () => {
    const now = Date.now();
    const header = signatureHeader([secret], Math.floor(now / 1000), body);
    expect(verifyWebhook(Buffer.from(body), header, secret, now)).toEqual(JSON.parse(body));
  });

  it("the receiver refuses a changed body, another secret, an old or future t and malformed headers", () => {
    const now = Date.now();
    const t = Math.floor(now / 1000);
    const header = signatureHeader([secret], t, body);
    expect(() => verifyWebhook(Buffer.from(body.replace("revoked", "approved")), header, secret, now)).toThrow(
      /signature mismatch/,
    );
    expect(() => verifyWebhook(Buffer.from(` ${body}`), header, secret, now)).toThrow(/signature mismatch/);
    expect(() => verifyWebhook(Buffer.from(body), header, "whsec_other", now)).toThrow(/signature mismatch/);
    expect(() => verifyWebhook(Buffer.from(body), signatureHeader([secret], t - 301, body), secret, now)).toThrow(
      /tolerance/,
    );
    expect(() => verifyWebhook(Buffer.from(body), signatureHeader([secret], t + 301, body), secret, now)).toThrow(
      /tolerance/,
    );
    expect(verifyWebhook(Buffer.from(body), signatureHeader([secret], t - 299, body), secret, now).data.status).toBe(
      "revoked",
    );
    for (const bad of [
      undefined,
      "",
      "t=1",
      `v1=${"a".repeat(64)}`,
      `t=abc,v1=${"a".repeat(64)}`,
      `t=${t},v1=${"A".repeat(64)}`,
      `t=${t},v1=abcd`,
    ]) {
      expect(() => verifyWebhook(Buffer.from(body), bad, secret, now)).toThrow(/malformed/);
    }
    // Another signature beside the right one (as during a secret rotation) still verifies.
    const [, v1] = header.split(",v1=");
    expect(verifyWebhook(Buffer.from(body), `t=${t},v1=${"0".repeat(64)},v1=${v1}`, secret, now).id).toBe("evt_abc");
  });
});
