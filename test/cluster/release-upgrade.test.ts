import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { cluster, helm, kubectlJson, ops } from "./cluster.js";
import { verifyWebhook, type WebhookEvent } from "../support/webhook-receiver.js";

// test-cluster.sh's upgrade step (docs/upgrades.md, "The tests that upgrade"), not the cluster suite:
// the previous release (releases.json) is installed from its own chart and images, this file writes
// every kind of data through the partner API and the operator CLI, then `helm upgrade`s to this
// commit while partners poll, upload and receive webhooks, checks every piece, `helm rollback`s to
// the previous revision under the same traffic, and checks again. Partner requests follow the
// documented retry rules (docs/partners.md: a request that got no answer, a 429 or a 503 with
// Retry-After is sent again, with the same Idempotency-Key), for up to RETRY_BUDGET_MS; anything
// else unexpected is a failure. Why a request may meet 503s for seconds here: docs/upgrades.md,
// "The tests that upgrade" (the in-chart stores restart).

const need = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: this file runs in npm run test:cluster's upgrade step`);
  return value;
};
const chart = need("UPGRADE_CHART");
const sets = JSON.parse(need("UPGRADE_SETS")) as string[];
const previousVersion = need("UPGRADE_FROM_VERSION");
const receiverConf = Object.fromEntries(
  need("UPGRADE_RECEIVER")
    .split(",")
    .map((kv) => kv.split("=", 2) as [string, string]),
);
const base = cluster.baseUrl;

/**
 * How long one request is tried again under the retry rules (the SDK's `retry.maxAttempts` is the
 * partner's to set; its default 5 tries cover about 5 s of Retry-After: 1), and the longest
 * Retry-After honoured. The longest time a request took to succeed is reported, so a longer window of
 * 503s shows in the log even when it stays inside the budget.
 */
const RETRY_BUDGET_MS = 60_000;
const MAX_WAIT_MS = 10_000;
/** Every loop stops by itself after this, whatever happens to helm. */
const TRAFFIC_LIMIT_MS = 20 * 60_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

type Credential = { client_id: string; client_secret: string };
interface Answer {
  status: number;
  text: string;
  json: any;
}

/** Partner requests, counted: every answer by status, every retry by its reason, every failure. */
class Ledger {
  requests = 0;
  answers = new Map<string, number>();
  retried = new Map<string, number>();
  failures: string[] = [];
  failuresByKind = new Map<string, number>();
  /** The longest a request took from its first try to its expected answer, when it needed a retry. */
  longestRetriedMs = 0;
  mostTries = 1;
  /** When each 503 came (Unix ms): set beside the stores' restarts in the log. */
  unavailableAt: number[] = [];

  /** One partner request under the retry rules; undefined (and a failure kept) unless an expected status came. */
  async send(what: string, request: () => Promise<Response>, expected: number[]): Promise<Answer | undefined> {
    const started = Date.now();
    const within = () => Date.now() - started < RETRY_BUDGET_MS;
    for (let tryNo = 1; ; tryNo++) {
      this.requests++;
      let res: Response;
      let text: string;
      try {
        res = await request();
        text = await res.text();
      } catch (err) {
        const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
        if (within()) {
          bump(this.retried, `no answer (${cause})`);
          await sleep(1000);
          continue;
        }
        return this.fail(what, `no answer (${cause})`, String(err));
      }
      bump(this.answers, String(res.status));
      if (res.status === 503) this.unavailableAt.push(Date.now());
      if (expected.includes(res.status)) {
        if (tryNo > 1) {
          this.longestRetriedMs = Math.max(this.longestRetriedMs, Date.now() - started);
          this.mostTries = Math.max(this.mostTries, tryNo);
        }
        return { status: res.status, text, json: text ? safeJson(text) : undefined };
      }
      const retryAfter = res.headers.get("retry-after");
      if ((res.status === 503 || res.status === 429) && retryAfter !== null && within()) {
        bump(this.retried, `${res.status} with Retry-After`);
        await sleep(Math.min(MAX_WAIT_MS, Math.max(0, Number(retryAfter) * 1000 || 1000)));
        continue;
      }
      return this.fail(what, `${res.status}${retryAfter === null ? "" : " with Retry-After"}`, text.slice(0, 200));
    }
  }

  fail(what: string, kind: string, detail: string): undefined {
    bump(this.failuresByKind, kind);
    this.failures.push(`${what}: ${kind} ${detail}`);
    return undefined;
  }

  summary(phase: string) {
    return {
      phase,
      requests: this.requests,
      answers: Object.fromEntries(this.answers),
      retried: Object.fromEntries(this.retried),
      mostTries: this.mostTries,
      longestRetriedMs: this.longestRetriedMs,
      failed: this.failures.length,
      failuresByKind: Object.fromEntries(this.failuresByKind),
    };
  }
}

function safeJson(text: string) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const tokenRequest = (c: Credential) => () =>
  fetch(`${base}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", ...c }),
    signal: AbortSignal.timeout(15_000),
  });
const get = (path: string, token: string) => () =>
  fetch(`${base}${path}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(15_000) });
const postJson = (path: string, token: string, body: unknown) => () =>
  fetch(`${base}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
const upload = (token: string, elder: string, bytes: Buffer, key: string) => () => {
  const form = new FormData();
  form.append("elder", elder);
  form.append("file", new Blob([new Uint8Array(bytes)], { type: "text/plain" }), "note.txt");
  return fetch(`${base}/v1/files`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "idempotency-key": key },
    body: form,
    signal: AbortSignal.timeout(30_000),
  });
};

/** Outside the measured traffic (set-up and checks): a token or a failed test. */
async function token(c: Credential): Promise<string> {
  const res = await tokenRequest(c)();
  const text = await res.text();
  if (res.status !== 200) throw new Error(`token: ${res.status} ${text}`);
  return (JSON.parse(text) as { access_token: string }).access_token;
}
async function plain(request: () => Promise<Response>): Promise<Answer> {
  const res = await request();
  const text = await res.text();
  return { status: res.status, text, json: text ? safeJson(text) : undefined };
}
async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(2000);
  }
}

/** The partners' webhook endpoint: HTTPS on the address the cluster reaches (test-cluster.sh), every event verified against the signing secrets. */
class Receiver {
  secrets: string[] = [];
  events = new Map<string, { event: WebhookEvent; raw: string }>();
  rejected: string[] = [];
  arrivals = 0;
  private server!: Server;

  async start() {
    this.server = createServer(
      { cert: readFileSync(receiverConf.cert!), key: readFileSync(receiverConf.key!) },
      (req, res) => {
        const chunks: Buffer[] = [];
        req.on("data", (c: Buffer) => chunks.push(c));
        req.on("end", () => {
          const raw = Buffer.concat(chunks);
          this.arrivals++;
          for (const secret of this.secrets) {
            try {
              const event = verifyWebhook(raw, req.headers["service-signature"] as string | undefined, secret);
              this.events.set(event.id, { event, raw: raw.toString("utf8") });
              res.writeHead(204).end();
              return;
            } catch {
              // the next partner's secret
            }
          }
          this.rejected.push(String(req.headers["service-signature"]));
          res.writeHead(400).end();
        });
      },
    );
    const [host, port] = receiverConf.listen!.split(":");
    await new Promise<void>((resolve, reject) => this.server.once("error", reject).listen(Number(port), host, resolve));
  }

  close() {
    return new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}

/** Partners at work while helm changes the release: each loop stops by itself (stop(), or the traffic limit). */
function partnerTraffic(w: Written, sandboxPartners: SandboxPartner[]) {
  const ledger = new Ledger();
  const uploads: { id: string; key: string; bytes: Buffer; receipt: string }[] = [];
  const sandboxConnections: { partner: SandboxPartner; id: string }[] = [];
  let stopped = false;
  const deadline = Date.now() + TRAFFIC_LIMIT_MS;
  const going = () => !stopped && Date.now() < deadline;
  const liveToken = async () =>
    (await ledger.send("POST /oauth/token", tokenRequest(w.live), [200]))?.json?.access_token as string | undefined;

  const poller = async () => {
    while (going()) {
      const bearer = await liveToken();
      if (!bearer) continue;
      for (let i = 0; i < 5 && going(); i++) {
        const con = await ledger.send(
          "GET /v1/connections/{approved}",
          get(`/v1/connections/${w.connections.approved}`, bearer),
          [200],
        );
        if (con && con.json?.status !== "approved")
          ledger.fail("GET /v1/connections/{approved}", "wrong body", con.text);
        const file = await ledger.send("GET /v1/files/{id}", get(`/v1/files/${w.file.id}`, bearer), [200]);
        if (file && file.json?.status !== "processed") ledger.fail("GET /v1/files/{id}", "wrong body", file.text);
      }
    }
  };
  const uploader = async () => {
    while (going()) {
      const bearer = await liveToken();
      if (!bearer) continue;
      for (let i = 0; i < 5 && going(); i++) {
        const key = `rollout-${randomBytes(8).toString("hex")}`;
        const bytes = Buffer.from(`lab note sent during the rollout, ${key}\n`.repeat(40));
        const sent = await ledger.send("POST /v1/files", upload(bearer, w.elders[0]!, bytes, key), [202]);
        if (sent) uploads.push({ id: sent.json.id as string, key, bytes, receipt: sent.text });
        await sleep(1000);
      }
    }
  };
  // Each sandbox partner once: its test connection to the sandbox elder, approved by itself after
  // the sandbox's delay, which sends connection.approved to the partner's endpoint.
  const connector = async () => {
    for (const partner of sandboxPartners) {
      if (!going() || partner.used) continue;
      partner.used = true;
      const bearer = (await ledger.send("POST /oauth/token (test)", tokenRequest(partner.test), [200]))?.json
        ?.access_token as string | undefined;
      if (bearer) {
        const res = await ledger.send(
          "POST /v1/connections (sandbox)",
          postJson("/v1/connections", bearer, { elder: w.sandboxElder }),
          [202],
        );
        if (res) sandboxConnections.push({ partner, id: res.json.id as string });
      }
      for (let waited = 0; waited < 15_000 && going(); waited += 500) await sleep(500);
    }
  };
  const workers = [poller(), poller(), uploader(), connector()];
  return {
    ledger,
    uploads,
    sandboxConnections,
    async stop() {
      stopped = true;
      await Promise.all(workers);
    },
  };
}

interface Revision {
  revision: number;
  status: string;
  chart: string;
  app_version: string;
  description: string;
}

interface SandboxPartner {
  partnerId: string;
  test: Credential;
  used: boolean;
}

/** What the previous release wrote, as it answered then. */
interface Written {
  partnerId: string;
  live: Credential;
  token: string;
  elders: string[];
  sandboxElder: string;
  connections: { approved: string; pending: string; revoked: string };
  file: { id: string; key: string; bytes: Buffer; receipt: string };
  events: string[];
  audit: Record<string, string[]>;
}

const auditIds = async (target: string) =>
  (((await ops("audit", "--target", target)).records as { id: string }[]) ?? []).map((r) => r.id);
const deliveryStates = async (partnerId: string) =>
  Object.fromEntries(
    ((await ops("webhook", "deliveries", partnerId)).deliveries as { event_id: string; state: string }[]).map((d) => [
      d.event_id,
      d.state,
    ]),
  );
const report = (line: object) => process.stderr.write(`partner traffic ${JSON.stringify(line)}\n`);

/**
 * The seconds (from `since`) at which the in-chart stores' pods (MongoDB, Kafka: one replica each)
 * started during a rollout, and the spans of seconds in which partners got 503s: what made them.
 */
async function storesBeside(ledger: Ledger, since: number) {
  const pods = await kubectlJson<{ items: any[] }>(
    "get",
    "pods",
    "-l",
    `app.kubernetes.io/instance=${cluster.release}`,
  );
  const restarted = pods.items
    .filter((p) => /(mongodb|kafka)$/.test(p.metadata.labels["app.kubernetes.io/component"] ?? ""))
    .map((p) => [p.metadata.name as string, Math.round((Date.parse(p.status.startTime) - since) / 1000)] as const)
    .filter(([, at]) => at >= 0);
  const seconds = [...new Set(ledger.unavailableAt.map((t) => Math.round((t - since) / 1000)))].sort((a, b) => a - b);
  return { storesStartedAtSecond: Object.fromEntries(restarted), unavailableAtSecond: seconds };
}

describe(`helm upgrade from v${previousVersion} to this commit, then helm rollback, under partner traffic`, () => {
  const receiver = new Receiver();
  const sandboxPartners: SandboxPartner[] = [];
  let w: Written;
  let duringUpgrade: ReturnType<typeof partnerTraffic>;
  let revisionBefore = 0;
  let previousChart: Revision;
  let passed = 0;

  beforeAll(async () => {
    await receiver.start();
  });
  afterAll(async () => {
    await receiver.close();
  });

  it(
    `v${previousVersion} (its own chart and images) takes every kind of data through the partner API and the operator CLI`,
    async () => {
      const history = JSON.parse(await helm("history", cluster.release, "-o", "json")) as Revision[];
      previousChart = history.at(-1)!;
      revisionBefore = previousChart.revision;
      // The step installed the previous release's own chart (releases.json: its chart version).
      expect(previousChart).toMatchObject({
        status: "deployed",
        chart: `partner-integration-${need("UPGRADE_FROM_CHART")}`,
      });

      const partner = (await ops(
        "partner",
        "create",
        "--name",
        "Upgrade Pharmacy",
        "--webhook-url",
        receiverConf.url!,
      )) as {
        partner_id: string;
        live: Credential;
        signing_secret: string;
      };
      receiver.secrets.push(partner.signing_secret);
      const elders: string[] = [];
      for (let i = 0; i < 3; i++) elders.push((await ops("elder", "create")).address as string);
      const bearer = await token(partner.live);
      const connect = async (elder: string) => {
        const res = await plain(postJson("/v1/connections", bearer, { elder }));
        expect(res.status).toBe(202);
        return res.json.id as string;
      };
      const approved = await connect(elders[0]!);
      await ops("connection", "approve", approved);
      const pending = await connect(elders[1]!);
      const revoked = await connect(elders[2]!);
      await ops("connection", "approve", revoked);
      await ops("connection", "sever", revoked);

      const key = `upgrade-${randomBytes(6).toString("hex")}`;
      const bytes = Buffer.from(`lab note written by v${previousVersion}\n`.repeat(200));
      const sent = await plain(upload(bearer, elders[0]!, bytes, key));
      expect(sent.status).toBe(202);
      const fileId = sent.json.id as string;
      await until("the file processed", 180_000, async () =>
        (await plain(get(`/v1/files/${fileId}`, bearer))).json?.status === "processed" ? true : undefined,
      );

      // The three events (approved, approved, revoked) exist as deliveries; the previous release's
      // webhook pods cannot verify the receiver's certificate (its chart cannot mount the partner
      // tools' CA), so they stay pending until this commit's pods deliver them.
      const states = await until("three deliveries", 60_000, async () => {
        const s = await deliveryStates(partner.partner_id);
        return Object.keys(s).length >= 3 ? s : undefined;
      });
      const events = Object.keys(states);
      expect(Object.values(states)).toEqual(["pending", "pending", "pending"]);
      const audit = { [approved]: await auditIds(approved), [revoked]: await auditIds(revoked) };
      expect(audit[approved]!.length).toBeGreaterThanOrEqual(2); // request, approve
      expect(audit[revoked]!.length).toBeGreaterThanOrEqual(3); // request, approve, sever

      const sandboxElder = (await ops("info")).sandbox_elder_address as string;
      // One sandbox connection per partner: enough partners for a connection every 15 s of both rollouts.
      for (let batch = 0; batch < 6; batch++) {
        const created = await Promise.all(
          [0, 1, 2, 3].map(
            (i) =>
              ops(
                "partner",
                "create",
                "--name",
                `Sandbox Pharmacy ${batch * 4 + i}`,
                "--webhook-url",
                receiverConf.url!,
              ) as Promise<{ partner_id: string; test: Credential; signing_secret: string }>,
          ),
        );
        for (const p of created) {
          receiver.secrets.push(p.signing_secret);
          sandboxPartners.push({ partnerId: p.partner_id, test: p.test, used: false });
        }
      }
      w = {
        partnerId: partner.partner_id,
        live: partner.live,
        token: bearer,
        elders,
        sandboxElder,
        connections: { approved, pending, revoked },
        file: { id: fileId, key, bytes, receipt: sent.text },
        events,
        audit,
      };
      passed++;
    },
    10 * 60_000,
  );

  /** Every piece the previous release wrote, and what the traffic wrote, as `phase` serves it. */
  async function checkEverything(phase: string, traffic: ReturnType<typeof partnerTraffic>[]) {
    // The bearer token issued by the previous release, before any of this.
    for (const [id, status] of [
      [w.connections.approved, "approved"],
      [w.connections.pending, "pending"],
      [w.connections.revoked, "revoked"],
    ] as const) {
      const res = await plain(get(`/v1/connections/${id}`, w.token));
      expect([phase, res.status, res.json]).toEqual([phase, 200, { id, status }]);
    }
    const bearer = await token(w.live);
    // The file and its Idempotency-Key both ways; so for a file sent during each rollout.
    const files = [w.file, ...traffic.flatMap((t) => t.uploads.slice(0, 1))];
    for (const file of files) {
      const replay = await plain(upload(bearer, w.elders[0]!, file.bytes, file.key));
      expect([phase, file.key, replay.status, replay.text]).toEqual([phase, file.key, 202, file.receipt]);
      const other = await plain(upload(bearer, w.elders[0]!, Buffer.from("other bytes\n"), file.key));
      expect([phase, file.key, other.status, other.json?.error?.code]).toEqual([
        phase,
        file.key,
        409,
        "idempotency_key_reuse",
      ]);
    }
    // Every file sent during the rollouts is there, and ends processed.
    for (const file of [w.file, ...traffic.flatMap((t) => t.uploads)]) {
      await until(`${phase}: ${file.id} processed`, 180_000, async () =>
        (await plain(get(`/v1/files/${file.id}`, bearer))).json?.status === "processed" ? true : undefined,
      );
    }
    // The audit trail the previous release wrote is listed.
    for (const [target, ids] of Object.entries(w.audit))
      expect([phase, target, await auditIds(target)]).toEqual([phase, target, expect.arrayContaining(ids)]);
    // The events list has every event, with its id.
    const listed = await plain(get("/v1/events?limit=100", bearer));
    expect([phase, listed.status]).toEqual([phase, 200]);
    expect([phase, (listed.json.data as { id: string }[]).map((e) => e.id)]).toEqual([
      phase,
      expect.arrayContaining(w.events),
    ]);
    // Each sandbox connection of the rollouts approved itself, and its event is listed for its partner.
    for (const { partner, id } of traffic.flatMap((t) => t.sandboxConnections)) {
      const testBearer = await token(partner.test);
      await until(`${phase}: sandbox ${id} approved`, 120_000, async () =>
        (await plain(get(`/v1/connections/${id}`, testBearer))).json?.status === "approved" ? true : undefined,
      );
      const events = await plain(get("/v1/events?limit=100", testBearer));
      expect([
        phase,
        id,
        (events.json.data as WebhookEvent[]).some(
          (e) => e.type === "connection.approved" && e.data.connection_id === id,
        ),
      ]).toEqual([phase, id, true]);
    }
  }

  it(
    `helm upgrade to this commit while partners poll, upload and receive webhooks: no failed request beyond the retry rules, every piece of data served`,
    async () => {
      expect(w).toBeDefined();
      const upgradeStarted = Date.now();
      duringUpgrade = partnerTraffic(w, sandboxPartners);
      await sleep(3000);
      try {
        await helm(
          "upgrade",
          cluster.release,
          chart,
          ...cluster.values.split(",").flatMap((f) => ["-f", f]),
          ...sets.flatMap((s) => ["--set", s]),
          "--wait",
          "--timeout",
          "15m",
        );
      } finally {
        await duringUpgrade.stop();
        report(duringUpgrade.ledger.summary("helm upgrade"));
      }
      report({ phase: "helm upgrade", ...(await storesBeside(duringUpgrade.ledger, upgradeStarted)) });
      const history = JSON.parse(await helm("history", cluster.release, "-o", "json")) as Revision[];
      expect(history.at(-1)).toMatchObject({ revision: revisionBefore + 1, status: "deployed" });
      expect(history.at(-1)!.chart).not.toBe(previousChart.chart);
      expect(duringUpgrade.ledger.requests).toBeGreaterThan(100);
      expect(duringUpgrade.uploads.length).toBeGreaterThan(5);
      expect(duringUpgrade.sandboxConnections.length).toBeGreaterThan(0);
      expect(duringUpgrade.ledger.failures).toEqual([]);

      await checkEverything("after the upgrade", [duringUpgrade]);
      // This commit's webhook pods deliver what the previous release left pending (same event ids) and
      // every event of the rollout's sandbox connections, each signed with its partner's secret.
      await until("the pending deliveries and the rollout's events delivered", 240_000, async () => {
        const wanted = [...w.events];
        const got = new Set([...receiver.events.values()].map((e) => e.event.id));
        const sandboxDone = duringUpgrade.sandboxConnections.every(({ id }) =>
          [...receiver.events.values()].some(
            (e) => e.event.type === "connection.approved" && e.event.data.connection_id === id,
          ),
        );
        return wanted.every((id) => got.has(id)) && sandboxDone ? true : undefined;
      });
      expect(Object.values(await deliveryStates(w.partnerId))).toEqual(["delivered", "delivered", "delivered"]);
      expect(receiver.rejected).toEqual([]);
      report({
        phase: "webhooks after the upgrade",
        received: receiver.events.size,
        arrivals: receiver.arrivals,
        rejected: receiver.rejected.length,
      });
      passed++;
    },
    30 * 60_000,
  );

  it(
    `helm rollback to v${previousVersion} under the same traffic: no failed request beyond the retry rules, everything both releases wrote served`,
    async () => {
      expect(passed).toBe(2);
      const rollbackStarted = Date.now();
      const duringRollback = partnerTraffic(w, sandboxPartners);
      await sleep(3000);
      try {
        await helm("rollback", cluster.release, "--wait", "--timeout", "15m");
      } finally {
        await duringRollback.stop();
        report(duringRollback.ledger.summary("helm rollback"));
      }
      report({ phase: "helm rollback", ...(await storesBeside(duringRollback.ledger, rollbackStarted)) });
      const history = JSON.parse(await helm("history", cluster.release, "-o", "json")) as Revision[];
      expect(history.at(-1)).toMatchObject({
        revision: revisionBefore + 2,
        status: "deployed",
        chart: previousChart.chart,
        description: `Rollback to ${revisionBefore}`,
      });
      expect(duringRollback.ledger.requests).toBeGreaterThan(100);
      expect(duringRollback.ledger.failures).toEqual([]);
      await checkEverything("after the rollback", [duringUpgrade, duringRollback]);
      // What this commit delivered stays delivered.
      expect(Object.values(await deliveryStates(w.partnerId))).toEqual(["delivered", "delivered", "delivered"]);
      passed++;
    },
    30 * 60_000,
  );
});
