import { randomBytes } from "node:crypto";
import { describe, expect, it } from "@jest/globals";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { RpcError, Status } from "../src/rpc/errors.js";
import { eventsv1 } from "@pi/proto";
import {
  AUDIT_ACTION_OWNERS,
  AUDIT_ACTIONS,
  AuditShapeError,
  auditEntry,
  auditRecordMessage,
  checkAuditRecord,
  refusalOf,
  shapeAudit,
  type AuditFields,
} from "../src/store/audit.js";
import { newId, newSecret } from "../src/rules/ids.js";
import { serviceError, ErrorReason } from "../src/rpc/errors.js";

// The pure parts of the audit trail (services/common/src/store/audit.ts): what a record
// may hold. docs/security.md, "Audit trail".

const RECORD_KEYS = ["action", "actor", "outcome", "reason", "service", "targets"];

// Everything a record must never carry, in every shape the system holds it.
const clientSecret = newSecret("sk_live");
const signingSecret = newSecret("whsec");
const elderAddress = "amber.falcon.river@elders.example";
const forbidden = {
  clientSecret,
  signingSecret,
  testSecret: newSecret("sk_test"),
  elderAddress,
  localPart: "amber.falcon.river",
  purpose: "lab_result",
  webhookUrl: "https://hooks.partner.example/pi?token=s3cr3t",
  partnerName: "Acme Pharmacy",
  fileContent: "%PDF-1.7 glucose 5.4 mmol/L",
  bearer: "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJwdHJfeCJ9.c2ln",
  pepper: randomBytes(32).toString("base64url"),
};

describe("audit records: what they hold", () => {
  it("a record has exactly the fixed fields: service, actor, action, target ids, outcome, reason", () => {
    const con = newId("con");
    const ptr = newId("ptr");
    const record = shapeAudit("connection", {
      action: "connection.decline",
      actor: "caregiver",
      targets: [con, ptr, null],
    });
    expect(record).toEqual({
      service: "connection",
      actor: "caregiver",
      action: "connection.decline",
      targets: [con, ptr],
      outcome: "ok",
      reason: "",
    });
    expect(Object.keys(record).sort()).toEqual(RECORD_KEYS);
  });

  it("no secret or health field can reach a record: extra fields are dropped, targets keep ids only, a rule with data in it is left out", () => {
    const ptr = newId("ptr");
    const cli = newId("cli");
    const values = Object.values(forbidden);
    const fields = {
      action: "credential.revoke",
      actor: ptr,
      targets: [cli, ...values, ptr, `${cli} ${clientSecret}`, `${cli}\n`, "ptr~decoy", `con_${"x".repeat(65)}`],
      refused: { code: "not_found", rule: `no credential for ${elderAddress}` },
      // What a careless caller might spread in: none of it is read.
      ...forbidden,
      address: elderAddress,
      secret: clientSecret,
      content: forbidden.fileContent,
    } as unknown as AuditFields;
    const record = shapeAudit("auth", fields);
    expect(Object.keys(record).sort()).toEqual(RECORD_KEYS);
    expect(record.targets).toEqual([cli, ptr]);
    expect(record.reason).toBe("not_found");
    const entry = auditEntry("auth", fields);
    const text =
      JSON.stringify(entry) +
      Buffer.from(toBinary(eventsv1.AuditRecordSchema, auditRecordMessage(entry))).toString("latin1");
    for (const value of values) expect({ value, found: text.includes(value) }).toEqual({ value, found: false });
    // The random part of each secret too, without its prefix.
    for (const secret of [clientSecret, signingSecret, forbidden.testSecret])
      expect(text.includes(secret.replace(/^(sk_live|sk_test|whsec)_/, ""))).toBe(false);
  });

  it("a refusal's rule is kept only when it is plain words: no digit, @, _, dot, colon or slash", () => {
    const refuse = (rule: string) =>
      shapeAudit("connection", {
        action: "connection.decline",
        actor: "caregiver",
        targets: [],
        refused: { code: "failed_precondition", rule },
      }).reason;
    expect(refuse("the connection is approved; sever it instead")).toBe(
      "failed_precondition: the connection is approved; sever it instead",
    );
    expect(refuse("the address does not resolve to an elder, so no caregiver can act on it")).toBe(
      "failed_precondition: the address does not resolve to an elder, so no caregiver can act on it",
    );
    for (const leaking of [
      `cannot decline ${newId("con")}`,
      `address ${elderAddress}`,
      "see https://hooks",
      "code 42",
      "amber.falcon.river",
      `secret ${signingSecret}`,
      "x".repeat(201),
      "Upper case",
    ]) {
      expect(refuse(leaking)).toBe("failed_precondition");
    }
  });

  it("random strings never get in: only what has the shape of an id is kept as a target", () => {
    for (let i = 0; i < 500; i++) {
      const junk = randomBytes(1 + (i % 40)).toString(i % 2 ? "base64" : "latin1");
      const record = shapeAudit("webhook", {
        action: "webhook.resend",
        actor: "operator",
        targets: [junk, `evt_${junk}`],
        refused: { code: "not_found", rule: junk },
      });
      for (const t of record.targets) expect(t).toMatch(/^(con|ptr|cli|eld|evt|key)_[0-9A-Za-z]{1,64}$/);
      expect(record.reason === "not_found" || /^not_found: [a-z][a-z ;,']*$/.test(record.reason)).toBe(true);
    }
  });

  it("an unknown action, actor or service is refused outright, not recorded half-way", () => {
    expect(() => shapeAudit("auth", { action: "partner.delete" as never, actor: "operator", targets: [] })).toThrow(
      AuditShapeError,
    );
    expect(() => shapeAudit("auth", { action: "partner.create", actor: "admin" as never, targets: [] })).toThrow(
      AuditShapeError,
    );
    expect(() => shapeAudit("auth", { action: "partner.create", actor: "ptr_no-dash" as never, targets: [] })).toThrow(
      AuditShapeError,
    );
    expect(() => shapeAudit("auth", { action: "partner.create", actor: elderAddress as never, targets: [] })).toThrow(
      AuditShapeError,
    );
    expect(() => shapeAudit("gateway" as never, { action: "partner.create", actor: "operator", targets: [] })).toThrow(
      AuditShapeError,
    );
    expect(() =>
      shapeAudit("auth", {
        action: "partner.create",
        actor: "operator",
        targets: [],
        refused: { code: "teapot" as never },
      }),
    ).toThrow(AuditShapeError);
  });

  it("targets are deduplicated, kept in order, at most eight", () => {
    const ids = Array.from({ length: 10 }, () => newId("evt"));
    expect(
      shapeAudit("webhook", { action: "webhook.recover", actor: "operator", targets: [ids[0], ...ids, ids[1]] })
        .targets,
    ).toEqual(ids.slice(0, 8));
  });

  it("an entry carries a fresh evt_ id, the time given and a rising sequence", () => {
    const at = new Date(1_700_000_000_000);
    const a = auditEntry("auth", { action: "signing_key.rotate", actor: "operator", targets: [newId("key")] }, at);
    const b = auditEntry("auth", { action: "signing_key.rotate", actor: "operator", targets: [] }, at);
    expect(a).toMatchObject({
      eventId: expect.stringMatching(/^evt_/),
      occurredAt: at,
      service: "auth",
      outcome: "ok",
    });
    expect(b.eventId).not.toBe(a.eventId);
    // Same millisecond: the sequence keeps the order they were written in.
    expect(b.sequence).toBeGreaterThan(a.sequence);
  });

  it("every action is named <thing>.<verb> in lower case", () => {
    for (const action of AUDIT_ACTIONS) expect(action).toMatch(/^[a-z_]+\.[a-z_]+$/);
  });
});

describe("AUDIT_ACTION_OWNERS", () => {
  it("names exactly one owning service for every action, by its prefix", () => {
    expect(Object.keys(AUDIT_ACTION_OWNERS).sort()).toEqual([...AUDIT_ACTIONS].sort());
    const byPrefix = {
      partner: "auth",
      credential: "auth",
      signing_key: "auth",
      elder: "connection",
      connection: "connection",
      webhook: "webhook",
    } as const;
    for (const action of AUDIT_ACTIONS)
      expect(AUDIT_ACTION_OWNERS[action]).toBe(byPrefix[action.split(".")[0] as keyof typeof byPrefix]);
  });
});

describe("audit records read back (the store's check)", () => {
  const good = () => ({
    service: "connection",
    actor: newId("ptr"),
    action: "connection.delete",
    targets: [newId("con")],
    outcome: "ok",
    reason: "",
  });

  it("a well-formed record passes with exactly its fields", () => {
    const r = good();
    expect(checkAuditRecord({ ...r, extra: elderAddress } as never)).toEqual(r);
    expect(
      checkAuditRecord({
        ...r,
        outcome: "refused",
        reason: "failed_precondition: the connection is approved; sever it instead",
      }),
    ).toMatchObject({ outcome: "refused" });
  });

  it.each([
    ["a target that is not an id", { targets: [elderAddress] }],
    ["a secret as a target", { targets: [clientSecret] }],
    ["an unknown action", { action: "connection.read" }],
    ["an unknown service", { service: "gateway" }],
    ["an action its service does not own (webhook writing a connection record)", { service: "webhook" }],
    [
      "an action its service does not own (connection writing a credential revocation)",
      { action: "credential.revoke" },
    ],
    ["an actor that is not one", { actor: "root" }],
    ["a reason when ok", { reason: "not_found" }],
    ["a refusal without a code", { outcome: "refused", reason: "" }],
    ["a reason with data in it", { outcome: "refused", reason: `not_found: ${elderAddress}` }],
    ["an unknown outcome", { outcome: "maybe" }],
    ["too many targets", { targets: Array.from({ length: 9 }, () => newId("evt")) }],
  ])("%s is refused", (_what, change) => {
    expect(checkAuditRecord({ ...good(), ...change })).toBeNull();
  });

  it("the topic's message carries the entry's fields and nothing else", () => {
    const entry = auditEntry("connection", {
      action: "connection.decline",
      actor: "caregiver",
      targets: [newId("con")],
      refused: { code: "failed_precondition", rule: "the connection is approved; sever it instead" },
    });
    const decoded = fromBinary(
      eventsv1.AuditRecordSchema,
      toBinary(eventsv1.AuditRecordSchema, auditRecordMessage(entry)),
    );
    expect(decoded).toMatchObject({
      id: entry.eventId,
      occurredAt: BigInt(entry.occurredAt.getTime()),
      service: "connection",
      actor: "caregiver",
      action: "connection.decline",
      targets: entry.targets,
      outcome: eventsv1.AuditOutcome.REFUSED,
      reason: "failed_precondition: the connection is approved; sever it instead",
    });
  });
});

describe("refusalOf", () => {
  it("names a service's deliberate refusals by code, never by message", () => {
    expect(refusalOf(new RpcError(`no partner ${elderAddress}`, Status.NOT_FOUND))).toEqual({ code: "not_found" });
    expect(refusalOf(new RpcError("bad", Status.INVALID_ARGUMENT))).toEqual({ code: "invalid_argument" });
    expect(refusalOf(new RpcError("taken", Status.ALREADY_EXISTS))).toEqual({ code: "already_exists" });
    expect(refusalOf(new RpcError("no", Status.FAILED_PRECONDITION))).toEqual({ code: "failed_precondition" });
    expect(refusalOf(new RpcError("raced", Status.ABORTED))).toEqual({ code: "aborted" });
    expect(refusalOf(serviceError(ErrorReason.NOT_FOUND, "no such connection"))).toEqual({ code: "not_found" });
  });

  it("is nothing for a failure that decided nothing (database or Kafka down, a bug)", () => {
    expect(refusalOf(new RpcError("down", Status.UNAVAILABLE))).toBeUndefined();
    expect(refusalOf(new RpcError("bug", Status.INTERNAL))).toBeUndefined();
    expect(refusalOf(new RpcError("slow", Status.DEADLINE_EXCEEDED))).toBeUndefined();
    expect(refusalOf(new Error("ECONNREFUSED"))).toBeUndefined();
    expect(refusalOf("not_found")).toBeUndefined();
  });
});
