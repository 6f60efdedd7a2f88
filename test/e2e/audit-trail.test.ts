import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, call, opsCliEnv, opsFor, runOpsCli } from "../support/partner-api.js";
import { NO_RATE_LIMITS } from "../support/auth.js";

// The audit trail end to end (docs/security.md, "Audit trail"): caregivers' acts through the
// operator CLI, partners' requests through the gateway, operator commands; each service records
// its own changes, the auth service stores them, and `ops audit` (the compiled CLI, in its own
// process) lists them newest first.

let stack: TestStack;
let ops: ReturnType<typeof opsFor>;

beforeAll(async () => {
  stack = await startTestStack(NO_RATE_LIMITS);
  ops = opsFor(stack.settings);
});
afterAll(async () => {
  await stack?.stop();
});

interface Printed {
  id: string;
  occurred_at: string;
  actor: string;
  action: string;
  targets: string[];
  outcome: "ok" | "refused";
  reason: string | null;
  service: string;
}

/** `ops audit ... --json` as an operator runs it: exactly one JSON object, exit 0. */
async function auditCli(...args: string[]): Promise<Printed[]> {
  const run = await runOpsCli(opsCliEnv(stack.settings), ["audit", ...args, "--json"]);
  expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
  expect(run.stdout.trim().split("\n")).toHaveLength(1);
  const out = JSON.parse(run.stdout) as { records: Printed[] };
  expect(Object.keys(out)).toEqual(["records"]);
  return out.records;
}

/** Records reach the trail through Kafka: waits until `count` records name `target`. */
async function awaitRecords(target: string, count: number, timeoutMs = 30_000): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; ; ) {
    const { records } = await ops.audit({ target });
    if (records.length >= count) return;
    if (Date.now() > deadline) throw new Error(`${records.length} of ${count} audit records for ${target}: ${JSON.stringify(records.map((r) => r.action))}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const brief = (r: Printed) => [r.action, r.actor, r.outcome];

describe("audit trail: connections", () => {
  it("a caregiver's decline, then the partner's DELETE and new request for the same elder: all three stay visible, in order, with their actors", async () => {
    const partner = await ops.partnerCreate({ name: "Audit Pharmacy" });
    const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const elder = await ops.elderCreate();

    const first = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
    expect(first.status).toBe(202);
    const id = first.json!.id as string;
    expect(await ops.connectionAct("decline", id)).toEqual({ id, internal_status: "declined" });
    expect((await call(stack.baseUrl, token, "DELETE", `/v1/connections/${id}`)).status).toBe(200);
    const again = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address });
    expect(again.status).toBe(202);
    // The partner sees a fresh pending request (a decline is never shown to it), and it is the same connection.
    expect(again.json).toMatchObject({ id, status: "pending" });

    await awaitRecords(id, 4);
    const records = await auditCli("--target", id);
    expect(records.map(brief)).toEqual([
      ["connection.request", partner.partner_id, "ok"],
      ["connection.delete", partner.partner_id, "ok"],
      ["connection.decline", "caregiver", "ok"],
      ["connection.request", partner.partner_id, "ok"],
    ]);
    for (const r of records) {
      expect(r).toMatchObject({ service: "connection", reason: null, id: expect.stringMatching(/^evt_/) });
      expect(r.targets).toEqual([id, partner.partner_id, elder.elder_id]);
    }
    const times = records.map((r) => Date.parse(r.occurred_at));
    expect([...times].sort((a, b) => b - a)).toEqual(times);

    // By the elder's id, the same history (and the elder's creation), and never the elder's address.
    const byElder = await auditCli("--target", elder.elder_id);
    expect(byElder.map((r) => r.action)).toEqual(["connection.request", "connection.delete", "connection.decline", "connection.request", "elder.create"]);
    expect(JSON.stringify(byElder)).not.toContain(elder.address.split("@")[0]);
  });

  it("a caregiver's refused act is recorded with the rule that refused it", async () => {
    const partner = await ops.partnerCreate({ name: "Refused Audit Lab" });
    const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const elder = await ops.elderCreate();
    const id = (await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address })).json!.id as string;
    await expect(ops.connectionAct("sever", id)).rejects.toThrow(/only an approved connection can be severed/);
    await awaitRecords(id, 2);
    const [refused] = await auditCli("--target", id, "--limit", "1");
    expect(refused).toMatchObject({
      action: "connection.sever",
      actor: "caregiver",
      outcome: "refused",
      reason: "failed_precondition: the connection is pending; only an approved connection can be severed",
    });
  });
});

describe("audit trail: operator commands", () => {
  it("credential revoke and partner suspend appear with the operator as actor and their outcome; a refused revoke with its reason; no secret anywhere", async () => {
    const since = new Date().toISOString();
    const partner = await ops.partnerCreate({ name: "Audited Operator Clinic" });
    await ops.credentialRevoke(partner.test.client_id);
    await ops.partnerSetStatus(partner.partner_id, "suspended");
    const unknown = "cli_NoSuchCredential0000000";
    await expect(ops.credentialRevoke(unknown)).rejects.toThrow();

    await awaitRecords(partner.partner_id, 5);
    await awaitRecords(unknown, 1);
    const records = await auditCli("--target", partner.partner_id);
    expect(records.map(brief)).toEqual([
      ["partner.suspend", "operator", "ok"],
      ["credential.revoke", "operator", "ok"],
      ["credential.create", "operator", "ok"],
      ["credential.create", "operator", "ok"],
      ["partner.create", "operator", "ok"],
    ]);
    expect(records[1]!.targets).toEqual([partner.test.client_id, partner.partner_id]);
    expect(records.every((r) => r.service === "auth")).toBe(true);

    const [refused] = await auditCli("--target", unknown);
    expect(refused).toMatchObject({ action: "credential.revoke", actor: "operator", outcome: "refused", reason: "not_found", targets: [unknown] });

    // Everything since the start of this test, the refusal included, and none of the secrets shown at creation.
    const all = await auditCli("--since", since);
    expect(all.map((r) => r.id)).toEqual(expect.arrayContaining([...records.map((r) => r.id), refused!.id]));
    const text = JSON.stringify(all);
    for (const secret of [partner.live.client_secret, partner.test.client_secret, partner.signing_secret]) {
      expect(text.includes(secret.replace(/^(sk_live|sk_test|whsec)_/, ""))).toBe(false);
    }
  });

  it("signing-key and signing-secret rotations and webhook address changes are recorded, never the secret or the address", async () => {
    const partner = await ops.partnerCreate({ name: "Rotating Audit Lab" });
    const url = "http://127.0.0.1:9/hooks?token=partner-own-token";
    await ops.partnerSetWebhook(partner.partner_id, url);
    const rotated = await ops.partnerRotateSigningSecret(partner.partner_id, "1");
    const key = await ops.keysRotate();
    await awaitRecords(partner.partner_id, 5);
    await awaitRecords(key.kid, 1);
    const records = await auditCli("--target", partner.partner_id, "--limit", "2");
    expect(records.map(brief)).toEqual([
      ["partner.rotate_signing_secret", "operator", "ok"],
      ["partner.set_webhook", "operator", "ok"],
    ]);
    expect((await auditCli("--target", key.kid)).map(brief)).toEqual([["signing_key.rotate", "operator", "ok"]]);
    const text = JSON.stringify(records);
    expect(text).not.toContain("partner-own-token");
    expect(text).not.toContain(rotated.signing_secret.replace(/^whsec_/, ""));
  });

  it("a webhook resend is recorded against the event, the partner and the connection; a refused one with its code", async () => {
    const partner = await ops.partnerCreate({ name: "Resending Audit Lab" });
    const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const elder = await ops.elderCreate();
    const id = (await call(stack.baseUrl, token, "POST", "/v1/connections", { elder: elder.address })).json!.id as string;
    await ops.connectionAct("approve", id);
    let eventId: string | undefined;
    for (const deadline = Date.now() + 30_000; !eventId && Date.now() < deadline; ) {
      eventId = (await ops.webhookDeliveries(partner.partner_id)).deliveries[0]?.event_id;
      if (!eventId) await new Promise((r) => setTimeout(r, 100));
    }
    await ops.webhookResend(eventId!);
    const unknown = "evt_NoSuchEvent000000000000";
    await expect(ops.webhookResend(unknown)).rejects.toThrow();
    await awaitRecords(eventId!, 1);
    await awaitRecords(unknown, 1);
    const [resent] = await auditCli("--target", eventId!);
    expect(resent).toMatchObject({ action: "webhook.resend", actor: "operator", outcome: "ok", service: "webhook", targets: [eventId, partner.partner_id, id] });
    const [refused] = await auditCli("--target", unknown);
    expect(refused).toMatchObject({ action: "webhook.resend", actor: "operator", outcome: "refused", reason: "not_found" });
  });

  it("ops audit refuses a bad --limit, --since or --target with one line on stderr", async () => {
    for (const args of [["--limit", "0"], ["--since", "yesterday"], ["--target", "amber.falcon.river@elders.example"]]) {
      const run = await runOpsCli(opsCliEnv(stack.settings), ["audit", ...args, "--json"]);
      expect(run.code).not.toBe(0);
      expect(run.stdout).toBe("");
      expect(run.stderr.trim().split("\n")).toHaveLength(1);
    }
  });
});
