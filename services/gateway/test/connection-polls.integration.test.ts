import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Agent, request } from "node:http";
import { MongoClient } from "mongodb";
import { closeClient } from "@pi/common/rpc/client";
import { clientsFor, MAX_REQUESTS_PER_BATCH } from "@pi/common/rpc/clients";
import { Status } from "@pi/common/rpc/errors";
import { commonv1, connectionv1 } from "@pi/proto";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startConnectionService } from "../../connection/src/service.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";
import { startEdge, type Edge } from "./edge-harness.js";

// Polls of a connection end to end on their parts: two gateways, each in front of its own replica
// of the real connection service on the real database. Every poll reads the stored status.

let settings: Settings;
const replicas: RunningService[] = [];
const gateways: Edge[] = [];
let caregiver: ReturnType<ReturnType<typeof clientsFor>["connectionAdmin"]>;
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++)
    replicas.push(await startConnectionService(settings, createLogger(`connection-${i}`, settings.LOG_LEVEL)));
  caregiver = clientsFor({ ...settings, ...addressOf("connection", replicas[1]!) }).connectionAdmin();
  for (const replica of replicas) {
    const client = clientsFor({
      ...as(settings, "gateway"),
      CONNECTION_SERVICE_URL: `http://127.0.0.1:${replica.port}`,
    }).connection();
    gateways.push(
      await startEdge({
        // The timing test polls one partner's connections hundreds of times a second.
        settings: { RATE_LIMIT_V1_PER_SECOND: "100000" },
        connections: {
          getConnection: (req) => client.getConnection(req),
          getConnections: (req) => client.getConnections(req),
          requestConnection: (req) => client.requestConnection(req),
          revokeConnection: (req) => client.revokeConnection(req),
        },
      }),
    );
  }
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await Promise.all(gateways.map((g) => g.stop()));
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "connection")).dropDatabase();
  await mongo?.close();
});

/** An approved live connection of a new partner, and that partner's token at each gateway. */
async function approvedConnection() {
  const partnerId = newId("ptr");
  const tokens = await Promise.all(gateways.map((g) => g.token(partnerId)));
  const { address } = await caregiver.createElder({});
  const created = await gateways[0]!.send("POST", "/v1/connections", {
    headers: { authorization: `Bearer ${tokens[0]}`, "content-type": "application/json" },
    body: JSON.stringify({ elder: address }),
  });
  const id = created.json.id as string;
  await caregiver.approveConnection({ id });
  const poll = async (g: number) =>
    (await gateways[g]!.send("GET", `/v1/connections/${id}`, { headers: { authorization: `Bearer ${tokens[g]}` } }))
      .json.status as string;
  const remove = async (g: number) =>
    (await gateways[g]!.send("DELETE", `/v1/connections/${id}`, { headers: { authorization: `Bearer ${tokens[g]}` } }))
      .json.status as string;
  return { id, partnerId, poll, remove };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** GET through the first gateway on a kept-alive connection of its own: its status code and body. */
function poller(path: string, headers: Record<string, string>) {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const url = `${gateways[0]!.baseUrl}${path}`;
  return {
    get: () =>
      new Promise<string>((resolve, reject) => {
        request(url, { headers, agent }, (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => (body += c));
          res.on("end", () => resolve(`${res.statusCode} ${body}`));
          res.on("error", reject);
        })
          .on("error", reject)
          .end();
      }),
    close: () => agent.destroy(),
  };
}

describe("no-oracle guarantee 3 (timing): polls in batches read another partner's connection as they read an unknown id", () => {
  // The gateway sends the polls of one turn together (GetConnections), which reads them with the
  // asking partners in the filter: another partner's connection comes back no more than an unknown
  // id does (a first version read by id alone and was 18% slower for it). Polled in turn on one kept-alive connection, each poll is a batch of
  // its own, so nothing of the other's cost is shared; the median latencies may differ by at most 20%
  // (quiet machine 1.00-1.02; under the full suite 1.10; 1.4 when a foreign read cost 1 ms more).
  const SAMPLES = 300;
  const MARGIN = 1.2;

  it("polls of another partner's connection and of an unknown id get the identical 404 in equivalent time", async () => {
    const theirs = await approvedConnection();
    const token = await gateways[0]!.token(newId("ptr"));
    const headers = { authorization: `Bearer ${token}` };
    const sides = [`/v1/connections/${theirs.id}`, `/v1/connections/${newId("con")}`].map((path) => ({
      p: poller(path, headers),
      taken: [] as { ms: number; answer: string }[],
    }));
    try {
      for (let i = 0; i < 2 * SAMPLES; i++) {
        const side = sides[[0, 1, 1, 0][i % 4]!]!; // ABBA: neither side always goes first
        const at = performance.now();
        const answer = await side.p.get();
        side.taken.push({ ms: performance.now() - at, answer });
      }
    } finally {
      for (const side of sides) side.p.close();
    }
    const answers = new Set(sides.flatMap((side) => side.taken.map((t) => t.answer)));
    expect(answers.size).toBe(1);
    expect([...answers][0]).toMatch(/^404 /);
    const [foreign, unknown] = sides.map((side) => median(side.taken.map((t) => t.ms)));
    process.stderr.write(
      `[guarantee-3 timing] median poll ms: another partner's ${foreign!.toFixed(3)}, unknown ${unknown!.toFixed(3)}\n`,
    );
    expect(foreign! / unknown!).toBeLessThanOrEqual(MARGIN);
    expect(unknown! / foreign!).toBeLessThanOrEqual(MARGIN);
  }, 120_000);
});

describe("GetConnections", () => {
  it("answers each request as GetConnection would, in order: the owner's connection, nothing for an unknown, another partner's, the other mode's or a malformed id; more than the batch size refused whole", async () => {
    const mine = await approvedConnection();
    const theirs = await approvedConnection();
    const client = clientsFor({ ...as(settings, "gateway"), ...addressOf("connection", replicas[0]!) }).connection();
    const { partnerId } = mine;
    const ask = (id: string, mode = commonv1.Mode.LIVE) => ({ partnerId, id, mode });
    const { responses } = await client.getConnections({
      requests: [
        ask(mine.id),
        ask(newId("con")),
        ask(theirs.id),
        ask(mine.id, commonv1.Mode.TEST),
        ask("con_-"),
        ask(mine.id),
      ],
    });
    const approved = { id: mine.id, status: connectionv1.ExternalStatus.APPROVED };
    expect(responses.map((r) => r.connection && { id: r.connection.id, status: r.connection.status })).toEqual([
      approved,
      undefined,
      undefined,
      undefined,
      undefined,
      approved,
    ]);
    const tooMany = Array.from({ length: MAX_REQUESTS_PER_BATCH + 1 }, () => ask(mine.id));
    await expect(client.getConnections({ requests: tooMany })).rejects.toMatchObject({ code: Status.INVALID_ARGUMENT });
    closeClient(client);
  });
});

describe("connection polls across gateways", () => {
  it("monotonic reads across gateways: once one gateway answered revoked, the other never answers approved again", async () => {
    const c = await approvedConnection();
    expect(await c.poll(0)).toBe("approved");
    await caregiver.severConnection({ id: c.id });
    expect(await c.poll(1)).toBe("revoked");
    expect(await c.poll(0)).toBe("revoked");
  });

  it("a partner's own DELETE shows at once, through either gateway", async () => {
    const c = await approvedConnection();
    expect(await c.poll(0)).toBe("approved");
    expect(await c.poll(1)).toBe("approved");
    expect(await c.remove(1)).toBe("revoked");
    expect(await c.poll(0)).toBe("revoked");
    expect(await c.poll(1)).toBe("revoked");
  });

  it("during a rollout, a change waits out a read lease a 1.1.0 replica granted, fencing new ones first", async () => {
    const c = await approvedConnection();
    const connections = mongo.db(databaseName(settings.DATA_NAMESPACE, "connection")).collection("connections");
    const leasedUntil = new Date(Date.now() + 1000);
    await connections.updateOne({ _id: c.id as never }, { $set: { leasedUntil }, $inc: { version: 1 } });
    await caregiver.severConnection({ id: c.id });
    expect(Date.now()).toBeGreaterThanOrEqual(leasedUntil.getTime());
    expect((await connections.findOne({ _id: c.id as never }))?.fencedUntil).toBeInstanceOf(Date);
    expect(await c.poll(0)).toBe("revoked");
  });
});

describe("no-oracle guarantee 4 (timing): a decline does not change how a partner's polls of the connection are answered", () => {
  // A partner polling its own pending connection must not be able to tell from the polls' timing
  // that a caregiver declined it (and so that the address is a real elder). Rounds alternate
  // (ABBA) between a decline of a polled connection and a sham act of the same cost: the decline of
  // another, unpolled connection of the same partner. In each round four connections are polled in
  // closed loops through one gateway, each on a kept-alive connection of its own. The round's figure
  // is the mean latency of the target's polls during the act's window over the mean of the three
  // others' polls in the same window: whatever else the machine does (this process, its event loop,
  // the database) slows all four alike, so with equal treatment it is 1, whatever the load.
  //
  // Margin: the decline rounds' median figure may exceed the sham rounds' by at most 20%. Measured
  // at a load average of 30 on 2 cores: under equal treatment every round's figure was within
  // 0.91-1.07; at f45f645, where a decline fenced the polls' read leases, the decline rounds gave
  // 1.34-2.55 (every one of 16, two runs) against 0.93-1.05 for the sham rounds.
  const ROUNDS = 8;
  const POLLED = 4;
  const POLL_GAP_MS = 3;
  const MARGIN = 1.2;
  /** The act's window: at least this long, and until the target was polled MIN_SAMPLES times in it. */
  const WINDOW_MS = 1750;
  const MIN_SAMPLES = 12;
  async function round(kind: "decline" | "sham"): Promise<number> {
    const partnerId = newId("ptr");
    const token = await gateways[0]!.token(partnerId);
    const headers = { authorization: `Bearer ${token}` };
    const ids: string[] = [];
    for (let i = 0; i < POLLED + 1; i++) {
      const { address } = await caregiver.createElder({});
      const created = await gateways[0]!.send("POST", "/v1/connections", {
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify({ elder: address }),
      });
      ids.push(created.json.id as string);
    }
    const [target, ...rest] = ids;
    const unpolled = rest.pop()!;
    const polled = [target!, ...rest];
    const samples: { id: string; at: number; ms: number; answer: string }[] = [];
    let stop = false;
    const pollers = polled.map(async (id) => {
      const p = poller(`/v1/connections/${id}`, headers);
      try {
        while (!stop) {
          const at = performance.now();
          const answer = await p.get();
          samples.push({ id, at, ms: performance.now() - at, answer });
          await new Promise((r) => setTimeout(r, POLL_GAP_MS));
        }
      } finally {
        p.close();
      }
    });
    // Every polled connection polled a few times before the act.
    while (polled.some((id) => samples.filter((s) => s.id === id).length < 5))
      await new Promise((r) => setTimeout(r, POLL_GAP_MS));
    const actAt = performance.now();
    await caregiver.declineConnection({ id: kind === "decline" ? target! : unpolled });
    const targetSince = () => samples.filter((s) => s.id === target && s.at >= actAt).length;
    while (performance.now() < actAt + WINDOW_MS || targetSince() < MIN_SAMPLES)
      await new Promise((r) => setTimeout(r, POLL_GAP_MS));
    const windowEnd = performance.now();
    stop = true;
    await Promise.all(pollers);
    // Guarantee 4 by bytes as well: every poll of every connection read pending.
    expect(new Set(samples.map((s) => s.answer))).toEqual(
      new Set(polled.map((id) => `200 ${JSON.stringify({ id, status: "pending" })}`)),
    );
    const inWindow = samples.filter((s) => s.at >= actAt && s.at <= windowEnd);
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const targetMs = inWindow.filter((s) => s.id === target).map((s) => s.ms);
    const othersMs = inWindow.filter((s) => s.id !== target).map((s) => s.ms);
    expect(targetMs.length).toBeGreaterThanOrEqual(MIN_SAMPLES);
    return mean(targetMs) / mean(othersMs);
  }

  it("the polls of a connection being declined are answered as fast as during a sham act of equal cost (interleaved rounds)", async () => {
    const figures = { decline: [] as number[], sham: [] as number[] };
    for (let i = 0; i < ROUNDS; i++) {
      const order: ("decline" | "sham")[] = i % 2 === 0 ? ["decline", "sham"] : ["sham", "decline"];
      for (const kind of order) figures[kind].push(await round(kind));
    }
    const declined = median(figures.decline);
    const sham = median(figures.sham);
    const list = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(" ");
    process.stderr.write(
      `[guarantee-4 timing] the target's mean poll latency over the others': decline rounds ${list(figures.decline)} (median ${declined.toFixed(2)}); sham rounds ${list(figures.sham)} (median ${sham.toFixed(2)})\n`,
    );
    expect(declined).toBeLessThanOrEqual(sham * MARGIN);
  }, 600_000);
});
