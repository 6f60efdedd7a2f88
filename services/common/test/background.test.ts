import { PassThrough } from "node:stream";
import { afterEach, beforeEach, describe, expect, it, jest } from "@jest/globals";
import { consume, CONSUMER_SESSION_TIMEOUT_MS } from "../src/background/consume.js";
import type { Kafka } from "../src/events/kafka.js";
import { createLogger } from "../src/runtime/logger.js";
import { every } from "../src/background/periodic.js";
import { keepAlive } from "../src/background/lease.js";
import { metricsRegistry } from "../src/runtime/metrics.js";
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

  it("runNow during a round runs one more round right after it (several calls: one), and resolves once none is left", async () => {
    let rounds = 0;
    const round = async () => {
      rounds++;
      await sleep(10);
    };
    const p = every("woken", 60_000, round, logger, { runAtStart: false });
    const first = p.runNow();
    await settle();
    expect(rounds).toBe(1);
    const second = p.runNow();
    void p.runNow();
    expect(second).toBe(first);
    await jest.advanceTimersByTimeAsync(20);
    await first;
    expect(rounds).toBe(2);
    await jest.advanceTimersByTimeAsync(1_000);
    expect(rounds).toBe(2);
    await p.stop();
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

/** A stand-in for the library's consumer: each consume() hands out a stream the test writes messages to. */
function fakeKafka(opts: { failConsume?: boolean } = {}) {
  const consumes: Record<string, unknown>[] = [];
  const streams: PassThrough[] = [];
  const commits: string[] = [];
  let config: Record<string, unknown> = {};
  let closes = 0;
  const consumer = {
    on: () => consumer,
    consume: async (o: Record<string, unknown>) => {
      consumes.push(o);
      if (opts.failConsume) throw new Error("broker unreachable");
      const stream = Object.assign(new PassThrough({ objectMode: true }), {
        close: async () => void stream.end(),
      });
      streams.push(stream);
      return stream;
    },
    close: async () => void closes++,
  };
  const kafka = {
    consumer: (groupId: string, options: Record<string, unknown>) => {
      config = { groupId, ...options };
      return consumer;
    },
    // The lag gauge's client, read only at a scrape (none here).
    admin: () => ({ close: async () => {} }),
  } as unknown as Kafka;
  const message = (partition: number, offset: number, value = "x") => ({
    key: undefined,
    value: Buffer.from(value),
    headers: new Map(),
    partition,
    offset: BigInt(offset),
    timestamp: 0n,
    commit: async () => void commits.push(`${partition}@${offset + 1}`),
  });
  /** Writes messages to the newest stream. */
  const deliver = (...messages: ReturnType<typeof message>[]) => {
    for (const m of messages) streams.at(-1)!.write(m);
  };
  return { kafka, consumes, streams, commits, message, deliver, config: () => config, closes: () => closes };
}

/** Waits (on real timers) until `cond` holds. */
async function until(cond: () => boolean, ms = 5_000) {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > ms) throw new Error("condition not met in time");
    await sleep(5);
  }
}

const consumedCount = async (topic: string) =>
  (await metricsRegistry.getSingleMetric("messaging_client_consumed_messages_total")?.get())?.values.find(
    (v) => v.labels.messaging_destination_name === topic,
  )?.value ?? 0;

/** An error the library marks as one that trying again may cure (a broker gone), or not (a refusal). */
const kafkaError = (message: string, canRetry: boolean) =>
  Object.assign(new Error(message), {
    findBy: (k: string, v: unknown) => (k === "canRetry" && v === canRetry ? {} : null),
  });

describe("consume", () => {
  it("joins the group, reads from the beginning, counts each message handled, commits after it, and leaves on stop", async () => {
    const k = fakeKafka();
    const seen: string[] = [];
    const c = await consume({
      kafka: k.kafka,
      logger,
      group: "ns.svc",
      topic: "ns.topic-a",
      name: "a",
      each: async (m, partition) => void seen.push(`${partition}:${String(m.value)}@${m.offset}`),
    });
    expect(k.config()).toMatchObject({ groupId: "ns.svc", sessionTimeout: 30_000 });
    expect(k.consumes).toEqual([{ topics: ["ns.topic-a"], mode: "committed", fallbackMode: "earliest" }]);
    const before = await consumedCount("ns.topic-a");
    k.deliver(k.message(2, 7));
    await until(() => k.commits.length === 1);
    expect({ seen, commits: k.commits }).toEqual({ seen: ["2:x@7"], commits: ["2@8"] });
    expect(await consumedCount("ns.topic-a")).toBe(before + 1);
    await c.stop();
    expect(k.closes()).toBe(1);
  });

  it("a batch handler gets a partition's messages at once, counted and committed once it returns; a failed batch counts nothing and is read again", async () => {
    const k = fakeKafka();
    let fail = true;
    const batches: string[] = [];
    const c = await consume({
      kafka: k.kafka,
      logger,
      group: "ns.svc",
      topic: "ns.topic-b",
      name: "b",
      quickHandover: true,
      partitionsConsumedConcurrently: 3,
      eachBatch: async (messages, partition) => {
        batches.push(`${partition}:${messages.map((m) => m.offset).join(",")}`);
        if (fail) throw new Error("database unreachable");
      },
    });
    expect(k.config()).toMatchObject({ sessionTimeout: CONSUMER_SESSION_TIMEOUT_MS });
    const before = await consumedCount("ns.topic-b");
    k.deliver(k.message(0, 1), k.message(0, 2));
    // The failure closes the consumer, and a new one reads from the committed offsets.
    await until(() => k.streams.length === 2);
    expect({ batches, counted: (await consumedCount("ns.topic-b")) - before, commits: k.commits }).toEqual({
      batches: ["0:1,2"],
      counted: 0,
      commits: [],
    });
    fail = false;
    k.deliver(k.message(0, 1), k.message(0, 2), k.message(1, 5));
    await until(() => k.commits.length === 2);
    expect(batches.slice(1).sort()).toEqual(["0:1,2", "1:5"]);
    expect({ counted: (await consumedCount("ns.topic-b")) - before, commits: k.commits.sort() }).toEqual({
      counted: 3,
      commits: ["0@3", "1@6"],
    });
    await c.stop();
  });

  it("is alive while it starts again after a failure that may pass (a broker gone), and not after one that cannot", async () => {
    const k = fakeKafka();
    const c = await consume({
      kafka: k.kafka,
      logger,
      group: "g",
      topic: "t",
      name: "t",
      each: async () => {},
    });
    k.streams[0]!.destroy(kafkaError("Connection closed", true));
    await until(() => k.streams.length === 2);
    expect(c.alive()).toBe(true);
    k.streams[1]!.destroy(kafkaError("Group authorization failed", false));
    await until(() => !c.alive());
    expect(k.streams.length).toBe(2);
    await c.stop();
  });

  it("without commits, placed at the given offsets, and started again from where it was", async () => {
    const k = fakeKafka();
    let handled = 0;
    const c = await consume({
      kafka: k.kafka,
      logger,
      group: "g",
      topic: "t",
      name: "t",
      fromBeginning: false,
      commit: false,
      startAt: [{ partition: 0, offset: "42" }],
      each: async () => void handled++,
    });
    expect(k.consumes[0]).toEqual({
      topics: ["t"],
      fallbackMode: "latest",
      mode: "manual",
      offsets: [{ topic: "t", partition: 0, offset: 42n }],
    });
    k.deliver(k.message(0, 42));
    await until(() => handled === 1);
    k.streams[0]!.destroy(kafkaError("Connection closed", true));
    await until(() => k.streams.length === 2);
    expect(k.consumes[1]).toMatchObject({ offsets: [{ topic: "t", partition: 0, offset: 43n }] });
    expect(k.commits).toEqual([]);
    await c.stop();
  });

  it("a set-up that fails leaves the group and throws", async () => {
    const k = fakeKafka({ failConsume: true });
    await expect(
      consume({ kafka: k.kafka, logger, group: "g", topic: "t", name: "t", each: async () => {} }),
    ).rejects.toThrow("broker unreachable");
    expect(k.closes()).toBe(1);
  });

  it("refuses to start without exactly one handler", async () => {
    const k = fakeKafka();
    await expect(consume({ kafka: k.kafka, logger, group: "g", topic: "t", name: "t" })).rejects.toThrow(TypeError);
  });
});
