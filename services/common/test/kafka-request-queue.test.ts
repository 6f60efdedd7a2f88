import { createHook } from "node:async_hooks";
import { createRequire } from "node:module";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "@jest/globals";

// kafkajs 2.2.4's request queue re-armed a timer of 1 ms forever once its queue was empty (kafkajs
// issue 1556): about a thousand timers a second in every idle process. patches/kafkajs+2.2.4.patch
// (kafkajs PR 1667, applied by patch-package at install) schedules a check only while requests
// wait. These tests drive the installed RequestQueue, so they fail if the patch is not applied.

const require = createRequire(import.meta.url);
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const RequestQueue = require("kafkajs/src/network/requestQueue/index.js") as any;

const logger = { debug() {}, info() {}, warn() {}, error() {} };
const queues: { destroy(): void; throttleCheckTimeoutId: NodeJS.Timeout | null }[] = [];

function newQueue() {
  const queue = new RequestQueue({
    maxInFlightRequests: null,
    requestTimeout: 30_000,
    enforceRequestTimeout: false,
    clientId: "t",
    broker: "b",
    logger,
  });
  queues.push(queue);
  return queue;
}

function request(correlationId: number, sent: number[]) {
  return {
    entry: { correlationId, apiKey: 3, apiName: "Metadata", apiVersion: 0, resolve: () => {}, reject: () => {} },
    expectResponse: true,
    sendRequest: () => sent.push(correlationId),
  };
}

/** Timers created while `during` runs. */
async function timersCreated(during: () => Promise<void>): Promise<number> {
  let n = 0;
  const hook = createHook({
    init(_id, type) {
      if (type === "Timeout") n++;
    },
  }).enable();
  try {
    await during();
  } finally {
    hook.disable();
  }
  return n;
}

afterEach(() => {
  for (const q of queues.splice(0)) {
    if (q.throttleCheckTimeoutId) clearTimeout(q.throttleCheckTimeoutId);
    q.destroy();
  }
});

describe("kafkajs request queue (patched: no timer loop when idle)", () => {
  it("arms no timer once the last response is in", async () => {
    const queue = newQueue();
    const sent: number[] = [];
    queue.push(request(1, sent));
    expect(sent).toEqual([1]);
    const timers = await timersCreated(async () => {
      queue.fulfillRequest({ correlationId: 1, payload: Buffer.alloc(0), size: 0 });
      await sleep(200);
    });
    // One for the sleep itself; 2.2.4 made one every millisecond (about 150 here).
    expect(timers).toBeLessThanOrEqual(3);
    expect(queue.throttleCheckTimeoutId).toBeNull();
  });

  it("still sends a request queued while the broker throttles, once the throttle ends", async () => {
    const queue = newQueue();
    const sent: number[] = [];
    queue.maybeThrottle(150);
    const queuedAt = Date.now();
    queue.push(request(7, sent));
    expect(sent).toEqual([]);
    while (sent.length === 0 && Date.now() - queuedAt < 5000) await sleep(10);
    expect(sent).toEqual([7]);
    expect(Date.now() - queuedAt).toBeGreaterThanOrEqual(140);
    // And nothing is left scheduled after it went out.
    queue.fulfillRequest({ correlationId: 7, payload: Buffer.alloc(0), size: 0 });
    expect(queue.throttleCheckTimeoutId).toBeNull();
  });
});
