import { contextFromHeaders, inSpan, SpanKind } from "@pi/common/runtime/telemetry";
import { webhookAttemptDuration, webhookDeliveries } from "@pi/common/runtime/metrics";
import type { Logger } from "@pi/common/runtime/logger";
import { type AttemptOutcome, noAnswer, type WebhookSender } from "./outbound.js";
import { afterAttempt as healthAfterAttempt, failingAfterMs } from "./endpoint-health.js";
import * as delivery from "./delivery-states.js";
import * as queue from "./queue.js";
import type { RetryPolicy } from "./schedule.js";
import { signatureHeader } from "./signature.js";
import type { QueueDoc, WebhookStore } from "./store.js";
import type { AuthClient } from "@pi/common/rpc/clients";
import { signingSecrets, webhookTarget, type WebhookTarget } from "./targets.js";

// One attempt at a claimed slot: prepare, send, record, the outcome only while the event is where the entry says.

export interface AttemptContext {
  store: WebhookStore;
  auth: AuthClient;
  sender: WebhookSender;
  policy: RetryPolicy;
  logger: Logger;
}

/** When the auth service cannot say where to send, the event waits this long; no attempt is counted. */
const TARGET_UNAVAILABLE_RETRY_MS = 5_000;
export const LEASE_MARGIN_MS = 5_000;
const NO_ADDRESS = noAnswer("partner has no webhook address any more");

export async function attempt(c: AttemptContext, entry: QueueDoc, leaseEnd: number, cutOff: () => boolean) {
  const prepared = await prepare(c, entry, leaseEnd);
  if (!prepared) return;
  const startedAt = new Date();
  const outcome = prepared.target ? await send(c.sender, prepared.target, entry, startedAt) : NO_ADDRESS;
  await record(c, entry, prepared.target, outcome, startedAt, cutOff());
}

/** The target, null (address removed after attempts: a failed attempt), or undefined: nothing sent now. */
async function prepare(
  { store, auth, policy, logger }: AttemptContext,
  entry: QueueDoc,
  leaseEnd: number,
): Promise<{ target: WebhookTarget | null } | undefined> {
  const log = { eventId: entry._id, partnerId: entry.partnerId };
  const target = await webhookTarget(auth, entry.partnerId).catch(async (err: unknown) => {
    logger.warn({ ...log, err }, "webhook target unavailable; event waits");
    await queue.release(store, entry._id, new Date(Date.now() + TARGET_UNAVAILABLE_RETRY_MS));
    return undefined;
  });
  if (target === undefined) return undefined;
  const kept = target ? null : delivery.noEndpoint(entry.attempts);
  if (kept) {
    const res = await store.events.updateOne(queue.current(entry), { $set: kept });
    if (res.modifiedCount === 0) await queue.resync(store, entry._id);
    else {
      await store.queue.deleteOne({ _id: entry._id });
      logger.info(log, "partner has no webhook address; event kept, not sent");
    }
    return undefined;
  }
  if (Date.now() + policy.attemptTimeoutSeconds * 1000 + LEASE_MARGIN_MS > leaseEnd) {
    // The lookup took so long that the attempt might outlive the claim: give the slot back.
    await queue.release(store, entry._id, new Date());
    return undefined;
  }
  return { target };
}

function send(sender: WebhookSender, target: WebhookTarget, entry: QueueDoc, startedAt: Date) {
  const span = {
    kind: SpanKind.CLIENT,
    parent: contextFromHeaders(entry.trace),
    attributes: { "webhook.event_id": entry._id, "webhook.attempt": entry.attempts + 1 },
  };
  return inSpan("webhook delivery", span, async (s) => {
    const at = startedAt.getTime();
    const signature = signatureHeader(signingSecrets(target, at), Math.floor(at / 1000), entry.body);
    const result = await sender.post(target.url, entry.body, { "service-signature": signature });
    s.setAttribute("http.response.status_code", result.statusCode);
    return result;
  });
}

async function record(
  c: AttemptContext,
  entry: QueueDoc,
  target: WebhookTarget | null,
  outcome: AttemptOutcome,
  startedAt: Date,
  cutOff: boolean,
): Promise<void> {
  const { store, logger } = c;
  const number = entry.attempts + 1;
  const step = delivery.afterAttempt(
    { ...outcome, windowStart: entry.createdAt, attemptsMade: number, endedAt: new Date(), cutOff },
    c.policy,
  );
  if (!step.counted) return queue.release(store, entry._id, step.dueAt);
  const { statusCode, durationMs, responseExcerpt, error } = outcome;
  const { counted, outcome: counter, ...next } = step;
  const fields = { eventId: entry._id, partnerId: entry.partnerId, attempt: number, statusCode, durationMs, error };
  const res = await store.events.updateOne(queue.current(entry), {
    $set: next,
    $inc: { attempts: 1 },
    $push: { attemptLog: { number, startedAt, statusCode, durationMs, responseExcerpt, ...(error ? { error } : {}) } },
  });
  if (res.modifiedCount === 0) {
    // A queue entry left behind by a crash, or a lease outlived: the event had moved on.
    logger.warn(
      { ...fields, state: next.state },
      "webhook attempt made for an event that had moved on; outcome not recorded",
    );
    return queue.resync(store, entry._id);
  }
  webhookDeliveries.inc({ outcome: counter });
  if (target) webhookAttemptDuration.observe(durationMs / 1000);
  // The endpoint's health is kept beside the queue's update, not after it: the slot frees no later.
  await Promise.all([
    queue.moveOn(store, entry._id, number, next.nextAttemptAt),
    target ? recordHealth(c, entry.partnerId, outcome.delivered, startedAt) : undefined,
  ]);
  if (outcome.delivered) logger.info({ ...fields, state: next.state }, "webhook delivered");
  else logger.info({ ...fields, state: next.state, nextAttemptAt: next.nextAttemptAt }, "webhook attempt failed");
}

/** Concurrent attempts of one partner may race here; at worst a streak starts one attempt late. */
async function recordHealth(c: AttemptContext, partnerId: string, delivered: boolean, at: Date): Promise<void> {
  const prev = await c.store.endpoints.findOne({ _id: partnerId });
  const failingAfter = failingAfterMs(c.policy.windowSeconds);
  const { next, transition } = healthAfterAttempt(prev, partnerId, delivered, at, failingAfter);
  // A healthy endpoint's success is written at most once a minute: one write less per delivery.
  const recentSuccess = prev?.lastSuccessAt && at.getTime() - prev.lastSuccessAt.getTime() < 60_000;
  if (delivered && prev && !prev.failingSince && recentSuccess) return;
  const { _id, ...fields } = next;
  await c.store.endpoints.updateOne({ _id }, { $set: fields }, { upsert: true });
  // Alerts match these lines: "alert":"webhook_endpoint_failing" and its recovery.
  if (transition === "failing")
    c.logger.warn(
      { partnerId, alert: "webhook_endpoint_failing", failingSince: next.failingSince },
      "webhook endpoint failing: every attempt failed for the failing period",
    );
  else if (transition === "recovered")
    c.logger.info({ partnerId, alert: "webhook_endpoint_recovered" }, "webhook endpoint recovered");
}
