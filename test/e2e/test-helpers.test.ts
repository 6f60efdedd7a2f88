import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { rehearse } from "../../sdk/typescript/examples/sandbox-outcomes.js";
import { NO_RATE_LIMITS } from "../support/auth.js";
import { fixture, sendFile, waitForStatus } from "../support/files.js";
import { accessToken, call, opsFor } from "../support/partner-api.js";
import { sharedTestStack, startTestStack, stopSharedStacks, type TestStack } from "../support/services.js";
import { startTestReceiver, type TestReceiver } from "../support/webhook-receiver.js";

// The sandbox's test helpers end to end (docs/edge.md, "Test helpers"; docs/partners.md, "Testing
// your integration"): POST /v1/test_helpers/connections/{id}/approve|sever|decline|expire through the
// gateway, the connection service and its state machine, the webhooks a real receiver verifies, the
// sends before and after, and the audit trail; the live token's, the foreign id's and the refused
// transition's answers; the failed test file; and the sandbox's own promise with a partner at its bound.

afterAll(stopSharedStacks);

type Res = Awaited<ReturnType<typeof call>>;
const ACTS = ["approve", "decline", "sever", "expire"] as const;
type Act = (typeof ACTS)[number];

/** What a partner can compare between two answers: status, headers but the volatile ones, body bytes. */
function bytes(res: Res) {
  const headers = Object.fromEntries([...res.headers].filter(([name]) => name !== "date" && name !== "x-request-id"));
  return { status: res.status, headers, text: res.text };
}

describe("test helpers", () => {
  // The sandbox approval takes 15 s here: long enough that a helper always acts first (on a loaded
  // machine too: at 8 s a decline once came after it), short enough
  // that a sentinel's own approval shows a round has run past the subject's due time.
  const DELAY_SECONDS = 15;
  let stack: TestStack;
  let ops: ReturnType<typeof opsFor>;
  let sandbox: string;
  const receivers: TestReceiver[] = [];

  beforeAll(async () => {
    stack = await sharedTestStack({
      ...NO_RATE_LIMITS,
      SANDBOX_APPROVAL_DELAY_SECONDS: String(DELAY_SECONDS),
      WEBHOOK_RETRY_BASE_SECONDS: "0.2",
    });
    ops = opsFor(stack.settings);
    sandbox = (await ops.info()).sandbox_elder_address;
  });
  afterAll(async () => {
    await Promise.all(receivers.map((r) => r.close()));
  });

  /** A partner with a verifying webhook receiver, its test and live tokens, and the sends and helpers it makes. */
  async function partner(name: string) {
    const receiver = await startTestReceiver("");
    receivers.push(receiver);
    const created = await ops.partnerCreate({ name, webhookUrl: receiver.url });
    receiver.useSecret(created.signing_secret);
    const test = await accessToken(stack.baseUrl, created.test.client_id, created.test.client_secret);
    const live = await accessToken(stack.baseUrl, created.live.client_id, created.live.client_secret);
    const id = created.partner_id;
    return {
      id,
      receiver,
      test,
      live,
      /** Its test connection to the sandbox elder: pending, waiting for the automatic approval. */
      async sandboxConnection(): Promise<string> {
        const res = await call(stack.baseUrl, test, "POST", "/v1/connections", { elder: sandbox });
        expect([res.status, res.json!.status]).toEqual([202, "pending"]);
        return res.json!.id as string;
      },
      helper: (act: Act, con: string, token = test) =>
        call(stack.baseUrl, token, "POST", `/v1/test_helpers/connections/${con}/${act}`),
      status: async (con: string) => (await call(stack.baseUrl, test, "GET", `/v1/connections/${con}`)).json!.status,
      /** A test file to the sandbox elder: its answer. */
      send: (purpose?: string) =>
        sendFile(stack.baseUrl, test, sandbox, fixture("sample.txt"), {
          filename: "note.txt",
          contentType: "text/plain",
          ...(purpose ? { purpose } : {}),
        }),
      /**
       * A sentinel for "nothing was sent": a live connection of the same partner approved by its
       * caregiver. Its event travels after any event stored before it (same partner, same
       * partition), so once it has arrived every earlier one would have been delivered too.
       */
      async flushEvents(): Promise<string> {
        const elder = await ops.elderCreate();
        const con = (await call(stack.baseUrl, live, "POST", "/v1/connections", { elder: elder.address })).json!
          .id as string;
        await ops.connectionAct("approve", con);
        await receiver.waitFor(
          (a) => a.some((x) => x.event.data.connection_id === con),
          20_000,
          "the sentinel's connection.approved",
        );
        return con;
      },
      /** Verified events for `con`, by type, in arrival order. */
      eventsOf: (con: string) =>
        receiver.arrivals.filter((a) => a.event.data.connection_id === con).map((a) => a.event),
    };
  }
  type Partner = Awaited<ReturnType<typeof partner>>;

  /** Records reach the trail through Kafka: waits until `target` has `count` of them, then returns them oldest first. */
  async function auditOf(target: string, count: number) {
    for (const deadline = Date.now() + 30_000; ; ) {
      const { records } = await ops.audit({ target });
      if (records.length >= count) return [...records].reverse();
      if (Date.now() > deadline)
        throw new Error(
          `${records.length} of ${count} audit records for ${target}: ${JSON.stringify(records.map((r) => r.action))}`,
        );
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const brief = (r: { action: string; actor: string; outcome: string; reason: string | null }) => [
    r.action,
    r.actor,
    r.outcome,
    r.reason,
  ];

  /**
   * Waits until a round of the sandbox approvals has run past every due time of connections made
   * before it: another partner's sandbox connection, made now, is approved by the round (its due
   * time comes after theirs).
   */
  async function sandboxRoundPassed(): Promise<void> {
    const other = await partner("Sentinel Sandbox Lab");
    const con = await other.sandboxConnection();
    await other.receiver.waitFor(
      (a) => a.some((x) => x.event.data.connection_id === con && x.event.type === "connection.approved"),
      (DELAY_SECONDS + 60) * 1000,
      "the sentinel's automatic approval",
    );
  }

  /** The identical 403 every refused send gets (guarantee 2), from an address that does not resolve for a test token. */
  async function refusedSend(p: Partner) {
    const unresolvable = (await ops.elderCreate()).address;
    const res = await sendFile(stack.baseUrl, p.test, unresolvable, fixture("sample.txt"), {
      filename: "note.txt",
      contentType: "text/plain",
    });
    expect(res.status).toBe(403);
    return res;
  }
  const sameAnswer = (a: { status: number; headers: Headers; text: string }) => ({
    status: a.status,
    text: a.text,
    headers: Object.fromEntries([...a.headers].filter(([name]) => name !== "date" && name !== "x-request-id")),
  });

  describe("each helper", () => {
    it("approve: pending -> approved at once with a verified connection.approved; sends refused before and accepted after; audited with the partner as actor; the automatic approval then does nothing", async () => {
      const p = await partner("Helper Approve Pharmacy");
      const con = await p.sandboxConnection();
      const before = await p.send();
      expect(sameAnswer(before)).toEqual(sameAnswer(await refusedSend(p)));

      const res = await p.helper("approve", con);
      expect([res.status, res.json]).toEqual([200, { id: con, status: "approved" }]);
      expect(await p.status(con)).toBe("approved");
      await p.receiver.waitFor((a) => a.length >= 1, 20_000, "connection.approved");
      const after = await p.send();
      expect([after.status, after.json!.status]).toEqual([202, "received"]);

      // Past the connection's own due time a round has run: it approved nothing more.
      await sandboxRoundPassed();
      await p.flushEvents();
      expect(p.receiver.rejected).toEqual([]);
      expect(p.eventsOf(con)).toEqual([
        {
          id: expect.stringMatching(/^evt_/),
          type: "connection.approved",
          created: expect.any(Number),
          data: { connection_id: con, status: "approved" },
        },
      ]);
      const records = await auditOf(con, 2);
      expect(records.map(brief)).toEqual([
        ["connection.request", p.id, "ok", null],
        ["connection.approve", p.id, "ok", null],
      ]);
      expect(records[1]!.targets).toEqual([con, p.id, "eld_sandbox"]);
    });

    it("sever: approved -> revoked with a verified connection.revoked; sends accepted before and the identical 403 no_active_connection after; audited with the partner as actor", async () => {
      const p = await partner("Helper Sever Clinic");
      const con = await p.sandboxConnection();
      expect((await p.helper("approve", con)).status).toBe(200);
      const before = await p.send();
      expect(before.status).toBe(202);

      const res = await p.helper("sever", con);
      expect([res.status, res.json]).toEqual([200, { id: con, status: "revoked" }]);
      expect(await p.status(con)).toBe("revoked");
      await p.receiver.waitFor((a) => a.length >= 2, 20_000, "connection.approved then connection.revoked");
      const after = await p.send();
      expect(sameAnswer(after)).toEqual(sameAnswer(await refusedSend(p)));
      expect(after.json).toEqual({
        error: {
          type: "permission_error",
          code: "no_active_connection",
          message: "There is no active connection to this elder.",
        },
      });

      await p.flushEvents();
      expect(p.receiver.rejected).toEqual([]);
      expect(p.eventsOf(con).map((e) => [e.type, e.data])).toEqual([
        ["connection.approved", { connection_id: con, status: "approved" }],
        ["connection.revoked", { connection_id: con, status: "revoked" }],
      ]);
      expect((await auditOf(con, 3)).map(brief)).toEqual([
        ["connection.request", p.id, "ok", null],
        ["connection.approve", p.id, "ok", null],
        ["connection.sever", p.id, "ok", null],
      ]);
    });

    it("decline: the connection reads pending, byte for byte like an undecided one (guarantee 4); no event, no automatic approval; sends refused before and after; audited with the partner as actor", async () => {
      const p = await partner("Helper Decline Lab");
      const con = await p.sandboxConnection();
      const undecided = await call(stack.baseUrl, p.test, "GET", `/v1/connections/${con}`);
      expect(sameAnswer(await p.send())).toEqual(sameAnswer(await refusedSend(p)));

      const res = await p.helper("decline", con);
      expect([res.status, res.json]).toEqual([200, { id: con, status: "pending" }]);
      const declined = await call(stack.baseUrl, p.test, "GET", `/v1/connections/${con}`);
      expect(bytes(declined)).toEqual(bytes(undecided));

      // Past its due time, a round has run: still pending, and nothing was sent.
      await sandboxRoundPassed();
      expect(bytes(await call(stack.baseUrl, p.test, "GET", `/v1/connections/${con}`))).toEqual(bytes(undecided));
      expect(sameAnswer(await p.send())).toEqual(sameAnswer(await refusedSend(p)));
      await p.flushEvents();
      expect(p.receiver.rejected).toEqual([]);
      expect(p.eventsOf(con)).toEqual([]);
      expect((await ops.webhookDeliveries(p.id)).deliveries).toHaveLength(1); // the sentinel's
      expect((await auditOf(con, 2)).map(brief)).toEqual([
        ["connection.request", p.id, "ok", null],
        ["connection.decline", p.id, "ok", null],
      ]);
    });

    it("expire: a pending connection, declined or not, reads expired at once; no event; sends refused before and after; audited with the partner as actor", async () => {
      const p = await partner("Helper Expire Pharmacy");
      const con = await p.sandboxConnection();
      expect(sameAnswer(await p.send())).toEqual(sameAnswer(await refusedSend(p)));

      const res = await p.helper("expire", con);
      expect([res.status, res.json]).toEqual([200, { id: con, status: "expired" }]);
      expect(await p.status(con)).toBe("expired");
      expect(sameAnswer(await p.send())).toEqual(sameAnswer(await refusedSend(p)));

      // A declined one too (another partner's: one sandbox connection per partner).
      const q = await partner("Helper Expire Declined Lab");
      const declined = await q.sandboxConnection();
      expect((await q.helper("decline", declined)).json!.status).toBe("pending");
      expect([(await q.helper("expire", declined)).json, await q.status(declined)]).toEqual([
        { id: declined, status: "expired" },
        "expired",
      ]);

      // The partner must request a new connection: the same one reopens, pending, scheduled again.
      const again = await call(stack.baseUrl, p.test, "POST", "/v1/connections", { elder: sandbox });
      expect([again.status, again.json]).toEqual([202, { id: con, status: "pending" }]);

      await p.flushEvents();
      await q.flushEvents();
      expect([p.eventsOf(con), q.eventsOf(declined)]).toEqual([[], []]);
      expect([p.receiver.rejected, q.receiver.rejected]).toEqual([[], []]);
      expect((await auditOf(con, 3)).map(brief)).toEqual([
        ["connection.request", p.id, "ok", null],
        ["connection.expire", p.id, "ok", null],
        ["connection.request", p.id, "ok", null],
      ]);
      expect((await auditOf(declined, 3)).map(brief)).toEqual([
        ["connection.request", q.id, "ok", null],
        ["connection.decline", q.id, "ok", null],
        ["connection.expire", q.id, "ok", null],
      ]);
    });
  });

  describe("refusals", () => {
    it("a live token: every helper is the 404 of a path no route has; the test connection is unchanged, nothing is sent, nothing is audited", async () => {
      const p = await partner("Helper Live Token Pharmacy");
      const con = await p.sandboxConnection();
      expect((await p.helper("approve", con)).status).toBe(200);
      const liveCon = (
        await call(stack.baseUrl, p.live, "POST", "/v1/connections", { elder: (await ops.elderCreate()).address })
      ).json!.id as string;
      const before = await p.send();
      expect(before.status).toBe(202);
      const unknownRoute = bytes(await call(stack.baseUrl, p.live, "POST", "/v1/test_helpers/no_such_route"));
      expect(unknownRoute.status).toBe(404);
      for (const act of ACTS) {
        for (const id of [con, liveCon]) {
          const res = await p.helper(act, id, p.live);
          expect([act, id, bytes(res)]).toEqual([act, id, unknownRoute]);
        }
      }
      expect(await p.status(con)).toBe("approved");
      expect((await call(stack.baseUrl, p.live, "GET", `/v1/connections/${liveCon}`)).json!.status).toBe("pending");
      expect((await p.send()).status).toBe(202);

      // A helper with the test token after them: its record follows the approval's, and its event is the only other one.
      expect((await p.helper("sever", con)).json).toEqual({ id: con, status: "revoked" });
      await p.flushEvents();
      expect(p.receiver.rejected).toEqual([]);
      expect(p.eventsOf(con).map((e) => e.type)).toEqual(["connection.approved", "connection.revoked"]);
      expect(p.eventsOf(liveCon)).toEqual([]);
      expect((await auditOf(con, 3)).map(brief)).toEqual([
        ["connection.request", p.id, "ok", null],
        ["connection.approve", p.id, "ok", null],
        ["connection.sever", p.id, "ok", null],
      ]);
      expect((await auditOf(liveCon, 1)).map(brief)).toEqual([["connection.request", p.id, "ok", null]]);
    });

    it("another partner's id: the 404 of an unknown id, byte for byte; its owner's connection is unchanged, nothing is sent, and the attempt is audited as refused", async () => {
      const owner = await partner("Helper Owner Lab");
      const other = await partner("Helper Intruder Lab");
      const con = await owner.sandboxConnection();
      expect((await owner.helper("approve", con)).status).toBe(200);
      expect((await owner.send()).status).toBe(202);
      const unknown = bytes(await other.helper("approve", "con_3kT9xQ2mVb7LpR4sN8wZcY"));
      expect(unknown.status).toBe(404);
      expect(JSON.parse(unknown.text)).toEqual({
        error: { type: "invalid_request_error", code: "not_found", message: "No such resource." },
      });
      for (const act of ACTS) expect([act, bytes(await other.helper(act, con))]).toEqual([act, unknown]);
      expect(await owner.status(con)).toBe("approved");
      expect((await owner.send()).status).toBe(202);

      await owner.flushEvents();
      await other.flushEvents();
      expect(owner.eventsOf(con).map((e) => e.type)).toEqual(["connection.approved"]);
      expect(other.eventsOf(con)).toEqual([]);
      const records = await auditOf(con, 6);
      expect(records.map(brief)).toEqual([
        ["connection.request", owner.id, "ok", null],
        ["connection.approve", owner.id, "ok", null],
        ...ACTS.map((act) => [`connection.${act}`, other.id, "refused", "not_found"]),
      ]);
      expect(records.slice(2).map((r) => r.targets)).toEqual(ACTS.map(() => [con, other.id]));
    });

    it("a transition the state machine does not allow: 400 invalid_request saying why, the status unchanged, nothing sent, the refusal audited", async () => {
      const p = await partner("Helper Refused Clinic");
      const con = await p.sandboxConnection();
      const before = await p.send();

      const sever = await p.helper("sever", con);
      expect([sever.status, sever.json]).toEqual([
        400,
        {
          error: {
            type: "invalid_request_error",
            code: "invalid_request",
            message: "The connection is pending; only an approved connection can be severed.",
          },
        },
      ]);
      expect(await p.status(con)).toBe("pending");
      expect(sameAnswer(await p.send())).toEqual(sameAnswer(before));

      // Once approved: decline and expire are refused too; once revoked, approve.
      expect((await p.helper("approve", con)).status).toBe(200);
      for (const act of ["decline", "expire"] as const) {
        const res = await p.helper(act, con);
        expect([act, res.status, res.json!.error]).toEqual([
          act,
          400,
          expect.objectContaining({ code: "invalid_request" }),
        ]);
        expect(await p.status(con)).toBe("approved");
      }
      expect((await p.helper("sever", con)).status).toBe(200);
      const approve = await p.helper("approve", con);
      expect([approve.status, approve.json!.error]).toEqual([
        400,
        expect.objectContaining({ message: "The connection is revoked; only a pending connection can be approved." }),
      ]);
      expect(await p.status(con)).toBe("revoked");

      // A test connection to an address other than the sandbox elder has no caregiver to consent.
      const unresolvable = (
        await call(stack.baseUrl, p.test, "POST", "/v1/connections", { elder: (await ops.elderCreate()).address })
      ).json!.id as string;
      const noElder = await p.helper("approve", unresolvable);
      expect([noElder.status, noElder.json!.error.message]).toEqual([
        400,
        "The address does not resolve to an elder, so no caregiver can act on it.",
      ]);
      expect(await p.status(unresolvable)).toBe("pending");

      await p.flushEvents();
      expect(p.eventsOf(con).map((e) => e.type)).toEqual(["connection.approved", "connection.revoked"]);
      expect(p.eventsOf(unresolvable)).toEqual([]);
      expect((await auditOf(con, 7)).map(brief)).toEqual([
        ["connection.request", p.id, "ok", null],
        [
          "connection.sever",
          p.id,
          "refused",
          "failed_precondition: the connection is pending; only an approved connection can be severed",
        ],
        ["connection.approve", p.id, "ok", null],
        ["connection.decline", p.id, "refused", "failed_precondition: the connection is approved; sever it instead"],
        [
          "connection.expire",
          p.id,
          "refused",
          "failed_precondition: the connection is approved; only a pending connection can expire",
        ],
        ["connection.sever", p.id, "ok", null],
        [
          "connection.approve",
          p.id,
          "refused",
          "failed_precondition: the connection is revoked; only a pending connection can be approved",
        ],
      ]);
    });
  });

  it("every 404 of the helpers, live and test, is byte for byte the 404 of a path no route has", async () => {
    const p = await partner("Helper 404 Pharmacy");
    const other = await partner("Helper 404 Other Lab");
    const testCon = await p.sandboxConnection();
    const liveCon = (
      await call(stack.baseUrl, p.live, "POST", "/v1/connections", { elder: (await ops.elderCreate()).address })
    ).json!.id as string;
    const foreignCon = await other.sandboxConnection();
    // Approved first, so that their status cannot change by itself meanwhile.
    for (const [who, id] of [
      [p, testCon],
      [other, foreignCon],
    ] as const)
      expect((await who.helper("approve", id)).status).toBe(200);
    const unknownCon = "con_3kT9xQ2mVb7LpR4sN8wZcY";
    const reference = bytes(await call(stack.baseUrl, p.live, "POST", "/v1/no_such_route"));
    expect(reference.status).toBe(404);
    const answers: [string, ReturnType<typeof bytes>][] = [
      ["test token, a path no route has", bytes(await call(stack.baseUrl, p.test, "POST", "/v1/no_such_route"))],
    ];
    for (const act of ACTS) {
      for (const [what, id] of [
        ["own test", testCon],
        ["own live", liveCon],
        ["foreign", foreignCon],
        ["unknown", unknownCon],
        ["malformed", "nope"],
      ] as const) {
        answers.push([`live token, ${act}, ${what} id`, bytes(await p.helper(act, id, p.live))]);
        if (what !== "own test") answers.push([`test token, ${act}, ${what} id`, bytes(await p.helper(act, id))]);
      }
    }
    for (const [what, answer] of answers) expect([what, answer]).toEqual([what, reference]);
    expect(await p.status(testCon)).toBe("approved");
    expect(await other.status(foreignCon)).toBe("approved");
  });

  it("docs/partners.md's walk through every outcome with the SDK runs as shown, and its webhooks arrive verified", async () => {
    const program = readFileSync(join("sdk", "typescript", "examples", "sandbox-outcomes.ts"), "utf8").trimEnd();
    expect(readFileSync(join("docs", "partners.md"), "utf8")).toContain(`\`\`\`ts\n${program}\n\`\`\``);
    const receiver = await startTestReceiver("");
    receivers.push(receiver);
    const created = await ops.partnerCreate({ name: "SDK Rehearsal Pharmacy", webhookUrl: receiver.url });
    receiver.useSecret(created.signing_secret);
    const seen = await rehearse({
      PI_BASE_URL: stack.baseUrl,
      PI_TEST_CLIENT_ID: created.test.client_id,
      PI_TEST_CLIENT_SECRET: created.test.client_secret,
      PI_SANDBOX_ELDER: sandbox,
    });
    expect(seen).toEqual({
      declined: "pending",
      sendWhilePending: "no_active_connection",
      severPending: "invalid_request",
      expired: "expired",
      approved: "approved",
      file: "processed",
      failedFile: "failed",
      severed: "revoked",
      sendAfterSever: "no_active_connection",
    });
    await receiver.waitFor((a) => a.length >= 2, 20_000, "connection.approved and connection.revoked");
    expect(receiver.rejected).toEqual([]);
    expect(receiver.arrivals.map((a) => [a.event.type, a.event.data.status])).toEqual([
      ["connection.approved", "approved"],
      ["connection.revoked", "revoked"],
    ]);
  });

  describe("files", () => {
    it("a test file sent with purpose sandbox_failed ends failed; any other purpose, or none, ends processed", async () => {
      const p = await partner("Helper Files Pharmacy");
      const con = await p.sandboxConnection();
      expect((await p.helper("approve", con)).status).toBe(200);
      const failing = await p.send("sandbox_failed");
      const processing = await p.send("Sandbox_Failed");
      const plain = await p.send();
      for (const res of [failing, processing, plain]) expect([res.status, res.json!.status]).toEqual([202, "received"]);
      expect(
        (await waitForStatus(stack.baseUrl, p.test, failing.json!.id as string, ["processed", "failed"])).json,
      ).toEqual({ id: failing.json!.id, status: "failed" });
      expect(
        (await waitForStatus(stack.baseUrl, p.test, processing.json!.id as string, ["processed", "failed"])).json!
          .status,
      ).toBe("processed");
      expect(
        (await waitForStatus(stack.baseUrl, p.test, plain.json!.id as string, ["processed", "failed"])).json!.status,
      ).toBe("processed");
    });

    it("in live mode purpose sandbox_failed has no effect: the file ends processed", async () => {
      const p = await partner("Helper Live Files Clinic");
      const elder = (await ops.elderCreate()).address;
      const con = (await call(stack.baseUrl, p.live, "POST", "/v1/connections", { elder })).json!.id as string;
      await ops.connectionAct("approve", con);
      const res = await sendFile(stack.baseUrl, p.live, elder, fixture("sample.txt"), {
        filename: "note.txt",
        contentType: "text/plain",
        purpose: "sandbox_failed",
      });
      expect(res.status).toBe(202);
      expect(
        (await waitForStatus(stack.baseUrl, p.live, res.json!.id as string, ["processed", "failed"])).json!.status,
      ).toBe("processed");
    });
  });
});

describe("the sandbox at its bound", () => {
  // The sandbox's own promise at scale: every test connection to the sandbox elder approves within
  // SANDBOX_APPROVAL_DELAY_SECONDS .. + 60 s, when one partner holds as many pending test connections
  // as TEST_PENDING_CONNECTIONS_PER_PARTNER allows and as many partners' sandbox connections are made
  // at the same moment, each polled by its partner (every poll takes a read lease, which an approval
  // waits out). A partner holds one connection per address, so one sandbox connection: the others it
  // holds are to addresses that never resolve for a test token. The delay is 2 s (the setting is the
  // seam): the test waits for the approvals themselves, never for the whole window.
  const DELAY_SECONDS = 2;
  const WINDOW_MS = (DELAY_SECONDS + 60) * 1000;
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack({ ...NO_RATE_LIMITS, SANDBOX_APPROVAL_DELAY_SECONDS: String(DELAY_SECONDS) });
  }, 120_000);
  afterAll(() => stack?.stop());

  it("every sandbox connection approves within its window, made all at once by as many partners as the bound, one of them at its bound, every one polled", async () => {
    const ops = opsFor(stack.settings);
    const bound = stack.settings.TEST_PENDING_CONNECTIONS_PER_PARTNER;
    const sandbox = (await ops.info()).sandbox_elder_address;
    // The partners are made a few at a time (onboarding is not what is under test here).
    const partners: { id: string; token: string }[] = [];
    while (partners.length < bound) {
      const made = await Promise.all(
        Array.from({ length: Math.min(5, bound - partners.length) }, async (_, i) => {
          const created = await ops.partnerCreate({ name: `Bound Lab ${partners.length + i}` });
          return {
            id: created.partner_id,
            token: await accessToken(stack.baseUrl, created.test.client_id, created.test.client_secret),
          };
        }),
      );
      partners.push(...made);
    }
    const full = partners[0]!;
    const others = Array.from(
      { length: bound - 1 },
      (_, i) =>
        `bound.lab.${"abcdefghijklmnopqrstuvwxyz"[Math.floor(i / 26) % 26]}${"abcdefghijklmnopqrstuvwxyz"[i % 26]}@${stack.settings.ADDRESS_DOMAIN}`,
    );

    // All at once: the full partner's connections to unresolvable addresses and every partner's sandbox connection.
    const [fills, made] = await Promise.all([
      Promise.all(others.map((elder) => call(stack.baseUrl, full.token, "POST", "/v1/connections", { elder }))),
      Promise.all(
        partners.map(async (p) => {
          const requestedAt = Date.now();
          const res = await call(stack.baseUrl, p.token, "POST", "/v1/connections", { elder: sandbox });
          return { ...p, requestedAt, answeredAt: Date.now(), res };
        }),
      ),
    ]);
    for (const res of [...fills, ...made.map((m) => m.res)])
      expect([res.status, res.json!.status]).toEqual([202, "pending"]);
    // The full partner is at its bound: one more is refused.
    const past = await call(stack.baseUrl, full.token, "POST", "/v1/connections", {
      elder: `bound.lab.past@${stack.settings.ADDRESS_DOMAIN}`,
    });
    expect(past.status).toBe(429);

    // Every partner polls its connection as the SDK's waitForConnection does (here every 250 ms) until it reads approved.
    const seen = await Promise.all(
      made.map(async (m) => {
        const id = m.res.json!.id as string;
        for (;;) {
          const res = await call(stack.baseUrl, m.token, "GET", `/v1/connections/${id}`);
          const at = Date.now();
          if (res.json!.status === "approved") return { ...m, connectionId: id, approvedSeenAt: at };
          expect(res.json!.status).toBe("pending");
          if (at - m.answeredAt > WINDOW_MS + 10_000)
            return { ...m, connectionId: id, approvedSeenAt: Number.POSITIVE_INFINITY };
          await new Promise((r) => setTimeout(r, 250));
        }
      }),
    );
    const late = seen.filter((s) => s.approvedSeenAt - s.answeredAt > WINDOW_MS).map((s) => s.connectionId);
    const slowestMs = Math.max(...seen.map((s) => s.approvedSeenAt - s.answeredAt));
    if (process.env.SANDBOX_BOUND_REPORT)
      process.stderr.write(
        `sandbox at its bound: ${seen.length} approvals, slowest seen ${slowestMs} ms after its request\n`,
      );
    expect({ late, slowestMs }).toEqual({ late: [], slowestMs: expect.any(Number) });

    // Never before the delay: each automatic approval's record is at least the delay after its request.
    for (const s of seen) {
      const approval = await autoApprovalOf(s.connectionId);
      expect(Date.parse(approval.occurred_at)).toBeGreaterThanOrEqual(s.requestedAt + DELAY_SECONDS * 1000);
    }
    // The full partner's other connections are untouched: still pending.
    const stillPending = await Promise.all(
      fills.map(
        async (f) =>
          (await call(stack.baseUrl, full.token, "GET", `/v1/connections/${f.json!.id as string}`)).json!.status,
      ),
    );
    expect(new Set(stillPending)).toEqual(new Set(["pending"]));
    /** The automatic approval's audit record (records reach the trail through Kafka). */
    async function autoApprovalOf(target: string) {
      for (const deadline = Date.now() + 30_000; ; ) {
        const { records } = await ops.audit({ target });
        const approval = records.find((r) => r.action === "connection.auto_approve");
        if (approval) return approval;
        if (Date.now() > deadline)
          throw new Error(
            `no connection.auto_approve record for ${target}: ${JSON.stringify(records.map((r) => r.action))}`,
          );
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }, 600_000);
});
