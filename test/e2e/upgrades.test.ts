import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common/store/mongo";
import { STORE_SCHEMAS } from "@pi/common/store/migrations/index";
import { accessToken, call } from "../support/partner-api.js";
import { sendFile, waitForStatus } from "../support/files.js";
import { freePort } from "../support/gateway-process.js";
import { verifyWebhook, type WebhookEvent } from "../support/webhook-receiver.js";
import { builtRelease, releaseList, repoRoot, stackEnv, startStack, type RunningStack } from "../support/releases.js";

// Upgrades in place, and the rollback (docs/upgrades.md): an earlier commit (the previous release,
// v1.0.0, and 4e36e67, the oldest a deployment may run: releases.json's `upgradeFrom`) runs `npm
// start` and writes every kind of data through the partner API and its own operator CLI; it is
// stopped, and this commit's `npm start` on the same STATE_DIR must serve every piece of it: ids,
// statuses, idempotency both ways, pending deliveries (same ids, same bytes, the old signing
// secret), audit records, tokens, events, the sandbox timer, and new work on old data. Then this
// commit stops and the previous release starts on what it wrote, and serves it.
//
// The earlier commits are built once into .state/releases/<commit> (test/support/releases.ts) and
// shared by every test here.

const list = releaseList();
const previous = list.releases.at(-1)!;

/** A partner's webhook endpoint: 503 (with Retry-After) while `failing`, else 204; every arrival recorded, signature verified. */
interface Endpoint {
  url: string;
  failing: boolean;
  secret: string;
  arrivals: { raw: string; event: WebhookEvent; answered: number }[];
  rejected: string[];
  until(predicate: () => boolean, timeoutMs: number, what: string): Promise<void>;
  close(): Promise<void>;
}

async function startEndpoint(): Promise<Endpoint> {
  const endpoint: Endpoint = {
    url: "",
    failing: true,
    secret: "",
    arrivals: [],
    rejected: [],
    async until(predicate, timeoutMs, what) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate()) {
        if (Date.now() > deadline)
          throw new Error(
            `timed out after ${timeoutMs} ms waiting for ${what}; arrivals: ${JSON.stringify(endpoint.arrivals.map((a) => [a.event.id, a.event.type, a.answered]))}`,
          );
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      let event: WebhookEvent;
      try {
        event = verifyWebhook(raw, req.headers["service-signature"] as string | undefined, endpoint.secret);
      } catch (err) {
        endpoint.rejected.push((err as Error).message);
        res.writeHead(400).end();
        return;
      }
      const answered = endpoint.failing ? 503 : 204;
      endpoint.arrivals.push({ raw: raw.toString("utf8"), event, answered });
      if (answered === 503) res.writeHead(503, { "retry-after": "1" }).end();
      else res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  endpoint.url = `http://127.0.0.1:${(server.address() as { port: number }).port}/webhooks`;
  return endpoint;
}

/** Settings of every start: short webhook retries (a 4-minute window: backoff at most 30 s), the sandbox's 45 s. */
const SETTINGS = {
  WEBHOOK_RETRY_BASE_SECONDS: "1",
  WEBHOOK_RETRY_WINDOW_SECONDS: "240",
  SANDBOX_APPROVAL_DELAY_SECONDS: "45",
};

/** What the old commit wrote, as it answered then. */
interface Written {
  partnerId: string;
  live: { client_id: string; client_secret: string };
  test: { client_id: string; client_secret: string };
  signingSecret: string;
  token: string;
  elders: string[];
  connections: { approved: string; pending: string; revoked: string; sandbox: string };
  file: { id: string; key: string; bytes: Buffer; receipt: string };
  deliveries: { event_id: string; type: string; state: string }[];
  audit: Record<string, string[]>;
  events: string[] | null;
}

const readStore = async (mongoPort: number, db: string, collection: string) => {
  const client = await MongoClient.connect(`mongodb://127.0.0.1:${mongoPort}/`);
  try {
    return await client.db(db).collection(collection).find().toArray();
  } finally {
    await client.close();
  }
};

const listCollections = async (mongoPort: number, db: string) => {
  const client = await MongoClient.connect(`mongodb://127.0.0.1:${mongoPort}/`);
  try {
    return (await client.db(db).listCollections().toArray()).map((c) => c.name).sort();
  } finally {
    await client.close();
  }
};

const auditIds = (stack: RunningStack, target: string) =>
  ((stack.ops("audit", "--target", target).records as { id: string }[]) ?? []).map((r) => r.id);

describe.each(list.upgradeFrom)(
  "upgrade in place from $name, then rollback to the previous release",
  ({ name, commit }) => {
    let oldDir = "";
    let previousDir = "";
    let stateDir = "";
    let port = 0;
    let mongoPort = 0;
    let endpoint: Endpoint;
    let stack: RunningStack | undefined;
    let written: Written;
    let fileByNew: { id: string; key: string; bytes: Buffer; receipt: string };
    let passed = 0;

    const start = async (dir: string, replicas: number) => {
      stack = await startStack(
        dir,
        stackEnv(stateDir, port, { ...SETTINGS, SERVICE_REPLICAS: String(replicas), MONGODB_PORT: String(mongoPort) }),
      );
      return stack;
    };
    const stop = async () => {
      await stack?.stop();
      stack = undefined;
    };

    beforeAll(async () => {
      // Built once (a later run finds them): the starting commit, and the previous release for the rollback.
      oldDir = builtRelease(commit);
      previousDir = builtRelease(previous.commit);
      stateDir = mkdtempSync(join(tmpdir(), "pi-upgrade-"));
      port = await freePort();
      mongoPort = await freePort();
      endpoint = await startEndpoint();
    }, 15 * 60_000);

    afterAll(async () => {
      await stop();
      await endpoint?.close();
      if (!stateDir) return;
      if (passed === 3 && process.env.KEEP_STACK_STATE !== "1") rmSync(stateDir, { recursive: true, force: true });
      else process.stderr.write(`upgrade test's STATE_DIR kept: ${stateDir} (logs in ${join(stateDir, "logs")})\n`);
    }, 60_000);

    it(
      `${name} writes every kind of data through the partner API and its operator CLI`,
      async () => {
        const old = await start(oldDir, 1);
        const partner = old.ops(
          "partner",
          "create",
          "--name",
          `Upgrade from ${name}`,
          "--webhook-url",
          endpoint.url,
        ) as unknown as {
          partner_id: string;
          live: Written["live"];
          test: Written["test"];
          signing_secret: string;
        };
        endpoint.secret = partner.signing_secret;
        const token = await accessToken(old.baseUrl, partner.live.client_id, partner.live.client_secret);
        const elders = [0, 1, 2].map(() => old.ops("elder", "create").address as string);
        const connect = async (elder: string, bearer = token) => {
          const res = await call(old.baseUrl, bearer, "POST", "/v1/connections", { elder });
          expect(res.status).toBe(202);
          return res.json!.id as string;
        };
        const approved = await connect(elders[0]!);
        old.ops("connection", "approve", approved);
        const pending = await connect(elders[1]!);
        const revoked = await connect(elders[2]!);
        old.ops("connection", "approve", revoked);
        old.ops("connection", "sever", revoked);

        const key = `upgrade-${randomBytes(6).toString("hex")}`;
        const bytes = Buffer.from(`lab note written by ${name}\n`.repeat(200));
        const sent = await sendFile(old.baseUrl, token, elders[0]!, bytes, {
          key,
          filename: "note.txt",
          contentType: "text/plain",
          purpose: "lab_result",
        });
        expect(sent.status).toBe(202);
        const fileId = (sent.json as { id: string }).id;
        await waitForStatus(old.baseUrl, token, fileId, ["processed"]);

        // Three events, each answered 503 at least once: pending deliveries.
        await endpoint.until(
          () => new Set(endpoint.arrivals.map((a) => a.event.id)).size >= 3,
          60_000,
          "three events tried",
        );
        const deliveries = (
          old.ops("webhook", "deliveries", partner.partner_id).deliveries as Written["deliveries"]
        ).map(({ event_id, type, state }) => ({ event_id, type, state }));
        expect(deliveries.filter((d) => d.state === "pending")).toHaveLength(3);
        const audit = {
          [approved]: auditIds(old, approved),
          [revoked]: auditIds(old, revoked),
          [partner.partner_id]: auditIds(old, partner.partner_id),
        };
        expect(audit[approved]!.length).toBeGreaterThanOrEqual(2); // request, approve
        expect(audit[revoked]!.length).toBeGreaterThanOrEqual(3); // request, approve, sever
        const listed = await fetch(`${old.baseUrl}/v1/events?limit=100`, {
          headers: { authorization: `Bearer ${token}` },
        });
        const events =
          listed.status === 200 ? ((await listed.json()) as { data: { id: string }[] }).data.map((e) => e.id) : null;

        // Last, so that its automatic approval falls due after the upgrade.
        const sandboxAddress = old.ops("info").sandbox_elder_address as string;
        const testToken = await accessToken(old.baseUrl, partner.test.client_id, partner.test.client_secret);
        const sandbox = await connect(sandboxAddress, testToken);
        written = {
          partnerId: partner.partner_id,
          live: partner.live,
          test: partner.test,
          signingSecret: partner.signing_secret,
          token,
          elders,
          connections: { approved, pending, revoked, sandbox },
          file: { id: fileId, key, bytes, receipt: sent.text },
          deliveries,
          audit,
          events,
        };
        expect((await call(old.baseUrl, testToken, "GET", `/v1/connections/${sandbox}`)).json!.status).toBe("pending");
        await stop();
        passed++;
      },
      8 * 60_000,
    );

    it(
      `this commit, started on ${name}'s STATE_DIR, serves every piece of it, and new work on it`,
      async () => {
        expect(written).toBeDefined();
        const now = await start(repoRoot, 2);
        const w = written;
        // Tokens: the bearer token issued before the upgrade still works; both credentials get new ones.
        for (const [id, status] of [
          [w.connections.approved, "approved"],
          [w.connections.pending, "pending"],
          [w.connections.revoked, "revoked"],
        ] as const) {
          const res = await call(now.baseUrl, w.token, "GET", `/v1/connections/${id}`);
          expect([res.status, res.json]).toEqual([200, { id, status }]);
        }
        const token = await accessToken(now.baseUrl, w.live.client_id, w.live.client_secret);
        const testToken = await accessToken(now.baseUrl, w.test.client_id, w.test.client_secret);

        // The file, and its Idempotency-Key both ways.
        expect((await call(now.baseUrl, token, "GET", `/v1/files/${w.file.id}`)).json).toEqual({
          id: w.file.id,
          status: "processed",
        });
        const replay = await sendFile(now.baseUrl, token, w.elders[0]!, w.file.bytes, {
          key: w.file.key,
          filename: "note.txt",
          contentType: "text/plain",
          purpose: "lab_result",
        });
        expect({ status: replay.status, text: replay.text }).toEqual({ status: 202, text: w.file.receipt });
        const other = await sendFile(now.baseUrl, token, w.elders[0]!, Buffer.from("other bytes\n"), {
          key: w.file.key,
          filename: "note.txt",
          contentType: "text/plain",
          purpose: "lab_result",
        });
        expect(other.status).toBe(409);
        expect((other.json as { error: { code: string } }).error.code).toBe("idempotency_key_reuse");

        // The pending deliveries: the same event ids, still pending.
        const deliveries = (now.ops("webhook", "deliveries", w.partnerId).deliveries as Written["deliveries"]).map(
          ({ event_id, type, state }) => ({ event_id, type, state }),
        );
        for (const d of w.deliveries) expect(deliveries).toContainEqual(d);

        // The audit trail written before is listed again, with the same ids (and what the upgrade's own work adds after).
        for (const [target, ids] of Object.entries(w.audit))
          expect(auditIds(now, target)).toEqual(expect.arrayContaining(ids));

        // The events list.
        const listed = await call(now.baseUrl, token, "GET", "/v1/events?limit=100");
        expect(listed.status).toBe(200);
        const listedIds = (listed.json!.data as { id: string }[]).map((e) => e.id);
        expect(listedIds).toEqual(expect.arrayContaining(w.deliveries.map((d) => d.event_id)));
        if (w.events) expect(listedIds).toEqual(expect.arrayContaining(w.events));

        // The endpoint comes back: each pending event arrives with the bytes it had before, signed with the old secret.
        const before = new Map(endpoint.arrivals.map((a) => [a.event.id, a.raw]));
        endpoint.failing = false;
        await endpoint.until(
          () =>
            w.deliveries.every((d) => endpoint.arrivals.some((a) => a.event.id === d.event_id && a.answered === 204)),
          90_000,
          "the pending deliveries",
        );
        for (const d of w.deliveries)
          expect(endpoint.arrivals.find((a) => a.event.id === d.event_id && a.answered === 204)!.raw).toBe(
            before.get(d.event_id),
          );
        expect(endpoint.rejected).toEqual([]);

        // The sandbox timer set before the upgrade fires after it, and its event is sent.
        await endpoint.until(
          () =>
            endpoint.arrivals.some(
              (a) =>
                a.answered === 204 &&
                a.event.type === "connection.approved" &&
                a.event.data.connection_id === w.connections.sandbox,
            ),
          120_000,
          "the sandbox connection's automatic approval",
        );
        expect(
          (await call(now.baseUrl, testToken, "GET", `/v1/connections/${w.connections.sandbox}`)).json!.status,
        ).toBe("approved");

        // New work on old data: a new file on the old connection, the old pending connection approved.
        const key = `upgrade-new-${randomBytes(6).toString("hex")}`;
        const bytes = Buffer.from(`lab note written after the upgrade from ${name}\n`.repeat(100));
        const sent = await sendFile(now.baseUrl, token, w.elders[0]!, bytes, {
          key,
          filename: "note.txt",
          contentType: "text/plain",
        });
        expect(sent.status).toBe(202);
        fileByNew = { id: (sent.json as { id: string }).id, key, bytes, receipt: sent.text };
        await waitForStatus(now.baseUrl, token, fileByNew.id, ["processed"]);
        now.ops("connection", "approve", w.connections.pending);
        expect((await call(now.baseUrl, token, "GET", `/v1/connections/${w.connections.pending}`)).json!.status).toBe(
          "approved",
        );
        await endpoint.until(
          () =>
            endpoint.arrivals.some((a) => a.answered === 204 && a.event.data.connection_id === w.connections.pending),
          60_000,
          "the new approval's event",
        );

        // Every store is marked: readable from the previous release (this one only expands), migrations recorded.
        for (const db of ["pi_auth", "pi_connection", "pi_file_intake", "pi_webhook"]) {
          const [mark] = (await readStore(mongoPort, db, "store_version")).filter((d) => d._id === "store");
          expect(mark).toMatchObject({ minReader: previous.version });
        }
        const migrations = (await readStore(mongoPort, "pi_file_intake", "store_migrations")).map(
          (m) => m.migrationName,
        );
        expect(migrations).toEqual(STORE_SCHEMAS["file-intake"].migrations.map((m) => m.name));
        // Each service knows every collection it holds (besides the versions' own two).
        for (const [service, schema] of Object.entries(STORE_SCHEMAS)) {
          const names = (await listCollections(mongoPort, databaseName("pi", service))).filter(
            (n) => !n.startsWith("system."),
          );
          const known = [...Object.keys(schema.collections), "store_version", "store_migrations"];
          expect({ service, unknown: names.filter((n) => !known.includes(n)) }).toEqual({ service, unknown: [] });
        }
        expect(await listCollections(mongoPort, "pi_auth_audit")).toEqual(["audit_records"]);
        expect(
          (await readStore(mongoPort, "pi_file_intake", "idempotency_keys")).filter((k) => k.mode === undefined),
        ).toEqual([]);
        // Run exactly once, by one of the two replicas.
        const logs = ["file-intake-1.log", "file-intake-2.log"].map((f) =>
          readFileSync(join(stateDir, "logs", f), "utf8"),
        );
        expect(logs.join("\n").match(/"msg":"store migrated"/g) ?? []).toHaveLength(1);
        await stop();
        passed++;
      },
      8 * 60_000,
    );

    it(
      `rollback: the previous release (v${previous.version}) serves what this commit wrote`,
      async () => {
        expect(fileByNew).toBeDefined();
        const back = await start(previousDir, 1);
        const w = written;
        const token = await accessToken(back.baseUrl, w.live.client_id, w.live.client_secret);
        for (const [id, status] of [
          [w.connections.approved, "approved"],
          [w.connections.pending, "approved"],
          [w.connections.revoked, "revoked"],
        ] as const) {
          expect((await call(back.baseUrl, token, "GET", `/v1/connections/${id}`)).json).toEqual({ id, status });
        }
        // Both files, and both keys (the one migrated from the old shape, the one this commit wrote).
        for (const file of [w.file, fileByNew]) {
          expect((await call(back.baseUrl, token, "GET", `/v1/files/${file.id}`)).json).toEqual({
            id: file.id,
            status: "processed",
          });
          const replay = await sendFile(back.baseUrl, token, w.elders[0]!, file.bytes, {
            key: file.key,
            filename: "note.txt",
            contentType: "text/plain",
            ...(file === w.file ? { purpose: "lab_result" } : {}),
          });
          expect({ status: replay.status, text: replay.text }).toEqual({ status: 202, text: file.receipt });
          const other = await sendFile(back.baseUrl, token, w.elders[0]!, Buffer.from("yet other bytes\n"), {
            key: file.key,
            filename: "note.txt",
            contentType: "text/plain",
          });
          expect(other.status).toBe(409);
        }
        // The audit trail and the events, as this commit left them.
        for (const [target, ids] of Object.entries(w.audit))
          expect(auditIds(back, target)).toEqual(expect.arrayContaining(ids));
        const listed = await call(back.baseUrl, token, "GET", "/v1/events?limit=100");
        expect((listed.json!.data as { id: string }[]).map((e) => e.id)).toEqual(
          expect.arrayContaining(w.deliveries.map((d) => d.event_id)),
        );
        const deliveries = back.ops("webhook", "deliveries", w.partnerId).deliveries as {
          event_id: string;
          state: string;
        }[];
        for (const d of w.deliveries)
          expect(deliveries.find((x) => x.event_id === d.event_id)?.state).toBe("delivered");
        // New work on the rolled-back stack.
        const sent = await sendFile(back.baseUrl, token, w.elders[0]!, Buffer.from("after the rollback\n".repeat(50)), {
          filename: "note.txt",
          contentType: "text/plain",
        });
        expect(sent.status).toBe(202);
        await waitForStatus(back.baseUrl, token, (sent.json as { id: string }).id, ["processed"]);
        await stop();
        passed++;
      },
      8 * 60_000,
    );
  },
);
