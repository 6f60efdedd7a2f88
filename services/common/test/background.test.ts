import { EventEmitter } from "node:events";
import { afterEach, beforeEach, describe, expect, it, jest } from "@jest/globals";
import type { Kafka } from "kafkajs";
import { consume, CONSUMER_SESSION_TIMEOUT_MS } from "../src/background/consume.js";
import { createLogger } from "../src/logger.js";
import { every } from "../src/background/periodic.js";
import { keepAlive } from "../src/background/lease.js";
import { metricsRegistry } from "../src/metrics.js";
import { refreshSigningKeys } from "../src/signing-keys.js";
import { retry, retryDelay } from "../src/background/retry.js";

// The kit for background work (services/common/src/background): periodic rounds, retries with
// backoff, lease keep-alive and the Kafka consumer. Time moves only through jest's fake timers.

const logger = createLogger("test", "silent");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Lets promise callbacks run (no timer moves). */
const settle = async () => {
  for (let i = 0; i < 10; i++) await Promise.resolve();
};

describe("every", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it("runs once at start and then once per interval", async () => {
    let rounds = 0;
    const p = every("count", 1_000, async () => void rounds++, logger);
    await settle();
    expect(rounds).toBe(1);
    await jest.advanceTimersByTimeAsync(999);
    expect(rounds).toBe(1);
    await jest.advanceTimersByTimeAsync(1);
    expect(rounds).toBe(2);
    await jest.advanceTimersByTimeAsync(3_000);
    expect(rounds).toBe(5);
    await p.stop();
    await jest.advanceTimersByTimeAsync(10_000);
    expect(rounds).toBe(5);
  });

  it("a failed round is logged and the next round runs", async () => {
    const warnings: unknown[] = [];
    let rounds = 0;
    const p = every(
      "flaky",
      1_000,
      async () => {
        if (++rounds === 1) throw new Error("database unreachable");
      },
      { warn: (obj: unknown) => void warnings.push(obj) } as never,
    );
    await settle();
    expect(warnings).toEqual([expect.objectContaining({ task: "flaky" })]);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(rounds).toBe(2);
    expect(warnings).toHaveLength(1);
    await p.stop();
  });

  it("runs at once, never two rounds at a time, survives a failing round, and stop() waits for the round in progress", async () => {
    let running = 0;
    let maxRunning = 0;
    let rounds = 0;
    let finished = 0;
    const periodic = every(
      "test",
      10,
      async () => {
        rounds++;
        running++;
        maxRunning = Math.max(maxRunning, running);
        await sleep(40);
        running--;
        finished++;
        if (rounds === 1) throw new Error("first round fails");
      },
      logger,
    );
    await jest.advanceTimersByTimeAsync(150);
    while (running === 0) await jest.advanceTimersByTimeAsync(1);
    let stopped = false;
    const stopping = periodic.stop().then(() => (stopped = true));
    await jest.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false); // a round is in progress
    await jest.advanceTimersByTimeAsync(40);
    await stopping;
    expect(rounds).toBeGreaterThanOrEqual(3);
    expect(maxRunning).toBe(1);
    expect(finished).toBe(rounds);
    const after = rounds;
    await jest.advanceTimersByTimeAsync(60_000);
    expect(rounds).toBe(after);
    expect(jest.getTimerCount()).toBe(0);
  });
});

describe("refreshSigningKeys", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it("reads the signing keys again every JWKS_REFRESH_SECONDS after the first load (auth replicas and gateways alike)", async () => {
    const loads: number[] = [];
    const started = Date.now();
    const refresh = refreshSigningKeys(
      { JWKS_REFRESH_SECONDS: 30 },
      async () => void loads.push(Date.now() - started),
      logger,
    );
    await jest.advanceTimersByTimeAsync(95_000);
    expect(loads).toEqual([30_000, 60_000, 90_000]);
    await refresh.stop();
  });
});

describe("retry", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it("backs off by the factor up to the most, and returns the first success", async () => {
    const at: number[] = [];
    const started = Date.now();
    const result = retry(
      "flaky",
      async (n) => {
        at.push(Date.now() - started);
        if (n < 5) throw new Error(`failure ${n}`);
        return "done";
      },
      { attempts: 8, firstDelayMs: 100, maxDelayMs: 300 },
    );
    await jest.advanceTimersByTimeAsync(2_000);
    await expect(result).resolves.toBe("done");
    // Waits of 100, 200, 300 (the most), 300.
    expect(at).toEqual([0, 100, 300, 600, 900]);
    expect([1, 2, 3, 4].map((n) => retryDelay(n, { firstDelayMs: 100, maxDelayMs: 300 }))).toEqual([
      100, 200, 300, 300,
    ]);
  });

  it("gives up with the last failure once the attempts are spent, logging each failure it tries again", async () => {
    const warnings: Record<string, unknown>[] = [];
    let calls = 0;
    const result = retry(
      "doomed",
      async () => {
        throw new Error(`failure ${++calls}`);
      },
      {
        attempts: 3,
        firstDelayMs: 50,
        factor: 1,
        logger: { warn: (obj: Record<string, unknown>) => void warnings.push(obj) } as never,
      },
    );
    const outcome = expect(result).rejects.toThrow("failure 3");
    await jest.advanceTimersByTimeAsync(1_000);
    await outcome;
    expect(calls).toBe(3);
    expect(warnings).toEqual([
      expect.objectContaining({ err: "failure 1", attempt: 1, retryInMs: 50 }),
      expect.objectContaining({ err: "failure 2", attempt: 2, retryInMs: 50 }),
    ]);
  });

  it("does not try again a failure retryIf refuses", async () => {
    let calls = 0;
    const fatal = Object.assign(new Error("Topic authorization failed"), { retriable: false });
    await expect(
      retry(
        "refused",
        async () => {
          calls++;
          throw fatal;
        },
        { attempts: 5, firstDelayMs: 10, retryIf: (err) => (err as { retriable?: boolean }).retriable === true },
      ),
    ).rejects.toBe(fatal);
    expect(calls).toBe(1);
  });

  it("with attempts Infinity, tries until it succeeds", async () => {
    let calls = 0;
    const result = retry(
      "forever",
      async () => {
        if (++calls < 30) throw new Error("not yet");
        return calls;
      },
      { attempts: Infinity, firstDelayMs: 10, maxDelayMs: 20 },
    );
    await jest.advanceTimersByTimeAsync(1_000);
    await expect(result).resolves.toBe(30);
  });
});

describe("keepAlive", () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it("renews once per period, not at once, until stopped", async () => {
    let renewals = 0;
    const kept = keepAlive(
      "a lease",
      100,
      async () => {
        renewals++;
        return true;
      },
      logger,
    );
    await settle();
    expect(renewals).toBe(0);
    await jest.advanceTimersByTimeAsync(350);
    expect(renewals).toBe(3);
    await kept.stop();
    await jest.advanceTimersByTimeAsync(1_000);
    expect(renewals).toBe(3);
  });

  it("stops renewing once the lease is no longer the holder's; a failed renewal is tried again", async () => {
    const answers: (boolean | Error)[] = [new Error("timeout"), true, false, true];
    let renewals = 0;
    keepAlive(
      "a lost lease",
      100,
      async () => {
        const answer = answers[renewals++]!;
        if (answer instanceof Error) throw answer;
        return answer;
      },
      logger,
    );
    await jest.advanceTimersByTimeAsync(1_000);
    expect(renewals).toBe(3);
  });
});

/** A stand-in for kafkajs's consumer: records what consume asked of it. */
function fakeKafka(opts: { failConnect?: boolean } = {}) {
  const events = new EventEmitter();
  const calls: string[] = [];
  let config: Record<string, unknown> = {};
  let runConfig: Record<string, unknown> = {};
  const seeks: unknown[] = [];
  const consumer = {
    events: { CRASH: "consumer.crash" },
    on: (name: string, fn: (e: unknown) => void) => events.on(name, fn),
    connect: async () => {
      calls.push("connect");
      if (opts.failConnect) throw new Error("broker unreachable");
    },
    subscribe: async (s: unknown) => void calls.push(`subscribe ${JSON.stringify(s)}`),
    run: async (r: Record<string, unknown>) => {
      calls.push("run");
      runConfig = r;
    },
    seek: (s: unknown) => void seeks.push(s),
    disconnect: async () => void calls.push("disconnect"),
  };
  const kafka = {
    consumer: (c: Record<string, unknown>) => {
      config = c;
      return consumer;
    },
  } as unknown as Kafka;
  return { kafka, events, calls, seeks, config: () => config, run: () => runConfig };
}

const consumedCount = async (topic: string) =>
  (await metricsRegistry.getSingleMetric("messaging_client_consumed_messages_total")?.get())?.values.find(
    (v) => v.labels.messaging_destination_name === topic,
  )?.value ?? 0;

describe("consume", () => {
  it("joins the group, reads from the beginning, counts each message handled, and leaves on stop", async () => {
    const k = fakeKafka();
    const seen: string[] = [];
    const c = await consume({
      kafka: k.kafka,
      logger,
      group: "ns.svc",
      topic: "ns.topic-a",
      name: "a",
      reportLag: false,
      each: async (m, partition) => void seen.push(`${partition}:${String(m.value)}`),
    });
    expect(k.config()).toMatchObject({ groupId: "ns.svc" });
    expect(k.config().sessionTimeout).toBeUndefined();
    expect(k.calls).toEqual(["connect", 'subscribe {"topic":"ns.topic-a","fromBeginning":true}', "run"]);
    const before = await consumedCount("ns.topic-a");
    await (k.run().eachMessage as (p: unknown) => Promise<void>)({
      partition: 2,
      message: { value: Buffer.from("x"), offset: "7" },
    });
    expect(seen).toEqual(["2:x"]);
    expect(await consumedCount("ns.topic-a")).toBe(before + 1);
    await c.stop();
    expect(k.calls.at(-1)).toBe("disconnect");
  });

  it("a batch handler's messages are counted once it returns, then it heartbeats; a failed batch counts nothing and is read again", async () => {
    const k = fakeKafka();
    let fail = true;
    await consume({
      kafka: k.kafka,
      logger,
      group: "ns.svc",
      topic: "ns.topic-b",
      name: "b",
      reportLag: false,
      quickHandover: true,
      partitionsConsumedConcurrently: 3,
      eachBatch: async () => {
        if (fail) throw new Error("database unreachable");
      },
    });
    expect(k.config()).toMatchObject({ sessionTimeout: CONSUMER_SESSION_TIMEOUT_MS });
    expect(k.run()).toMatchObject({ partitionsConsumedConcurrently: 3, autoCommit: true });
    let heartbeats = 0;
    const batch = {
      batch: { partition: 0, messages: [{ offset: "1" }, { offset: "2" }] },
      heartbeat: async () => void heartbeats++,
    };
    const eachBatch = k.run().eachBatch as (p: unknown) => Promise<void>;
    const before = await consumedCount("ns.topic-b");
    await expect(eachBatch(batch)).rejects.toThrow("database unreachable");
    expect({ counted: (await consumedCount("ns.topic-b")) - before, heartbeats }).toEqual({
      counted: 0,
      heartbeats: 0,
    });
    fail = false;
    await eachBatch(batch);
    expect({ counted: (await consumedCount("ns.topic-b")) - before, heartbeats }).toEqual({
      counted: 2,
      heartbeats: 1,
    });
  });

  it("is alive until kafkajs gives up on the consumer (a crash it restarts from does not count)", async () => {
    const k = fakeKafka();
    const c = await consume({
      kafka: k.kafka,
      logger,
      group: "g",
      topic: "t",
      name: "t",
      reportLag: false,
      each: async () => {},
    });
    expect(c.alive()).toBe(true);
    k.events.emit("consumer.crash", { payload: { restart: true, error: new Error("rebalance") } });
    expect(c.alive()).toBe(true);
    k.events.emit("consumer.crash", { payload: { restart: false, error: new Error("fatal") } });
    expect(c.alive()).toBe(false);
  });

  it("without commits, placed at the given offsets once it runs; from the end when asked", async () => {
    const k = fakeKafka();
    await consume({
      kafka: k.kafka,
      logger,
      group: "g",
      topic: "t",
      name: "t",
      reportLag: false,
      fromBeginning: false,
      commit: false,
      startAt: [{ partition: 0, offset: "42" }],
      each: async () => {},
    });
    expect(k.calls[1]).toBe('subscribe {"topic":"t","fromBeginning":false}');
    expect(k.run()).toMatchObject({ autoCommit: false });
    expect(k.seeks).toEqual([{ topic: "t", partition: 0, offset: "42" }]);
  });

  it("a set-up that fails leaves the group and throws", async () => {
    const k = fakeKafka({ failConnect: true });
    await expect(
      consume({ kafka: k.kafka, logger, group: "g", topic: "t", name: "t", reportLag: false, each: async () => {} }),
    ).rejects.toThrow("broker unreachable");
    expect(k.calls).toEqual(["connect", "disconnect"]);
  });

  it("refuses to start without exactly one handler", async () => {
    const k = fakeKafka();
    await expect(consume({ kafka: k.kafka, logger, group: "g", topic: "t", name: "t" })).rejects.toThrow(TypeError);
  });
});
