import { describe, expect, it } from "@jest/globals";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { KafkaMessage } from "@pi/common/events/kafka";
import { eventsv1 } from "@pi/proto";
import { createLogger } from "@pi/common/runtime/logger";
import { generateIdentity, parseOwnIdentity, parsePublicKeys } from "@pi/common/rpc/service-identity";
import { newId } from "@pi/common/rules/ids";
import { settingsSchema } from "@pi/common/runtime/settings";
import { signedAuditRecord } from "@pi/common/store/audit";
import { RpcError } from "@pi/common/rpc/errors";
import {
  AUDIT_VERIFICATION,
  auditQuery,
  auditRetentionCutoff,
  decodeAuditMessage,
  DEFAULT_AUDIT_LIMIT,
  verifyStoredRecord,
  type AuditRecordDoc,
} from "../src/audit.js";

// The audit store's pure parts: the listing's query, and what a message of the audit-events topic
// may become (docs/security.md, "Audit trail").

const logger = createLogger("audit-test", "silent");
const message = (value: Buffer | null, offset = "7"): KafkaMessage =>
  ({ key: null, value, offset, timestamp: "0", attributes: 0, headers: {} }) as KafkaMessage;
const identities = {
  connection: generateIdentity("connection"),
  webhook: generateIdentity("webhook"),
  auth: generateIdentity("auth"),
};
const publicKeys = parsePublicKeys(
  Object.values(identities)
    .map((i) => i.publicKey)
    .join(","),
);
const signer = parseOwnIdentity(identities.connection.key);
const record = (
  fields: Partial<eventsv1.AuditRecord> = {},
  by: ReturnType<typeof parseOwnIdentity> | null = signer,
) => {
  const unsigned = create(eventsv1.AuditRecordSchema, {
    id: newId("evt"),
    occurredAt: 1_700_000_000_000n,
    service: "connection",
    actor: "caregiver",
    action: "connection.decline",
    targets: [newId("con")],
    outcome: eventsv1.AuditOutcome.OK,
    reason: "",
    ...fields,
  });
  return Buffer.from(toBinary(eventsv1.AuditRecordSchema, by ? signedAuditRecord(unsigned, by) : unsigned));
};

describe("audit records retention", () => {
  it("the cut-off is AUDIT_RETENTION_SECONDS before now; the default keeps records 6 years", () => {
    const now = new Date("2030-06-01T00:00:00Z");
    expect(auditRetentionCutoff(now, 86400)).toEqual(new Date("2030-05-31T00:00:00Z"));
    const years = settingsSchema.parse({}).AUDIT_RETENTION_SECONDS / (365 * 86400);
    expect(years).toBe(6);
  });
});

describe("auditQuery", () => {
  it("0 and empty mean no bound; the limit defaults to 100", () => {
    expect(auditQuery({ since: 0n, target: "", limit: 0 })).toEqual({ limit: DEFAULT_AUDIT_LIMIT });
    const con = newId("con");
    expect(auditQuery({ since: 1_700_000_000_000n, target: con, limit: 5 })).toEqual({
      since: new Date(1_700_000_000_000),
      target: con,
      limit: 5,
    });
  });

  it.each([
    [{ since: 0n, target: "", limit: 1001 }],
    [{ since: 0n, target: "", limit: -1 }],
    [{ since: -1n, target: "", limit: 0 }],
    [{ since: 0n, target: "amber.falcon.river@elders.example", limit: 0 }],
    [{ since: 0n, target: '{"$ne":null}', limit: 0 }],
  ])("refuses %j", (req) => {
    expect(() => auditQuery(req)).toThrow(RpcError);
  });
});

describe("decodeAuditMessage", () => {
  it("a record becomes a document under its id, with where it was read", () => {
    const value = record();
    const doc = decodeAuditMessage(message(value), 2, logger, new Date(5), publicKeys);
    expect(doc).toMatchObject({
      _id: expect.stringMatching(/^evt_/),
      occurredAt: new Date(1_700_000_000_000),
      action: "connection.decline",
      outcome: "ok",
      reason: "",
      partition: 2,
      offset: 7,
    });
    expect(Object.keys(doc!).sort()).toEqual([
      "_id",
      "action",
      "actor",
      "occurredAt",
      "offset",
      "outcome",
      "partition",
      "reason",
      "sequence",
      "service",
      "signature",
      "signingKid",
      "storedAt",
      "targets",
    ]);
    // The signature stays with the record: a read checks it again.
    expect(doc).toMatchObject({ signature: expect.stringMatching(/^[A-Za-z0-9_-]{86}$/), signingKid: signer.kid });
  });

  it.each([
    ["no value", null],
    ["not protobuf", Buffer.from([0xff, 0xff, 0xff])],
    ["no id", record({ id: "" })],
    ["no time", record({ occurredAt: 0n })],
    ["an address as a target", record({ targets: ["amber.falcon.river@elders.example"] })],
    ["no outcome", record({ outcome: eventsv1.AuditOutcome.UNSPECIFIED })],
    [
      "free text as a reason",
      record({ outcome: eventsv1.AuditOutcome.REFUSED, reason: "not_found: amber.falcon.river@elders.example" }),
    ],
  ])("a message with %s is skipped", (_what, value) => {
    expect(decodeAuditMessage(message(value as Buffer | null), 0, logger, new Date(), publicKeys)).toBeNull();
  });

  const asWebhook = parseOwnIdentity(identities.webhook.key);
  const asAuth = parseOwnIdentity(identities.auth.key);
  it.each([
    ["unsigned", record({}, null)],
    ["signed by another service than the one it names", record({}, asWebhook)],
    [
      "naming the webhook service for a connection action, signed by the webhook service (a kind it does not own)",
      record({ service: "webhook" }, asWebhook),
    ],
    [
      "naming the auth service for a credential revocation, signed by the connection service",
      record({ service: "auth", action: "credential.revoke", actor: "operator", targets: [newId("cli")] }),
    ],
    [
      "altered after signing",
      (() => {
        const r = fromBinary(eventsv1.AuditRecordSchema, record());
        return Buffer.from(toBinary(eventsv1.AuditRecordSchema, { ...r, action: "connection.approve" }));
      })(),
    ],
  ])(
    "the audit trail accepts a record only from the service that owns that kind: a record %s is dropped",
    (_what, value) => {
      expect(decodeAuditMessage(message(value), 0, logger, new Date(), publicKeys)).toBeNull();
    },
  );

  it("a record of its own kind signed by its own service is kept (auth's credential revocation)", () => {
    const value = record(
      { service: "auth", action: "credential.revoke", actor: "operator", targets: [newId("cli")] },
      asAuth,
    );
    expect(decodeAuditMessage(message(value), 0, logger, new Date(), publicKeys)).toMatchObject({
      service: "auth",
      action: "credential.revoke",
    });
  });
});

describe("verifyStoredRecord: every read checks the signature kept with the record", () => {
  const stored = (fields: Partial<eventsv1.AuditRecord> = {}) =>
    decodeAuditMessage(message(record(fields)), 1, logger, new Date(), publicKeys)!;

  it("a record as stored verifies, a refusal with its reason too", () => {
    expect(verifyStoredRecord(stored(), publicKeys)).toEqual({ verified: true, reason: AUDIT_VERIFICATION.verified });
    const refused = stored({
      outcome: eventsv1.AuditOutcome.REFUSED,
      reason: "failed_precondition: the connection is pending; only an approved connection can be severed",
    });
    expect(verifyStoredRecord(refused, publicKeys)).toEqual({ verified: true, reason: "verified" });
  });

  it.each<[string, (doc: AuditRecordDoc) => AuditRecordDoc]>([
    ["the action", (d) => ({ ...d, action: "connection.approve" })],
    ["the actor", (d) => ({ ...d, actor: "system" })],
    ["a target", (d) => ({ ...d, targets: [newId("con")] })],
    ["the time", (d) => ({ ...d, occurredAt: new Date(d.occurredAt.getTime() + 1) })],
    ["the outcome", (d) => ({ ...d, outcome: "refused", reason: "not_found" })],
    ["the id (a copy inserted under another)", (d) => ({ ...d, _id: newId("evt") })],
    ["the sequence", (d) => ({ ...d, sequence: d.sequence + 1 })],
    ["the signature", (d) => ({ ...d, signature: `${d.signature![0] === "A" ? "B" : "A"}${d.signature!.slice(1)}` })],
  ])("a record whose %s was changed in the database does not verify", (_what, alter) => {
    expect(verifyStoredRecord(alter(stored()), publicKeys)).toEqual({
      verified: false,
      reason: AUDIT_VERIFICATION.altered,
    });
  });

  it("a record stored before signatures were kept says so; one whose key is no longer listed, that", () => {
    const { signature: _s, signingKid: _k, ...older } = stored();
    expect(verifyStoredRecord(older, publicKeys)).toEqual({
      verified: false,
      reason: "stored before signatures were kept",
    });
    const rotatedOut = parsePublicKeys(
      [identities.auth.publicKey, identities.webhook.publicKey, generateIdentity("connection").publicKey].join(","),
    );
    expect(verifyStoredRecord(stored(), rotatedOut)).toEqual({ verified: false, reason: "signing key not known" });
    // Another service's key under its kid: not known for the service the record names.
    expect(verifyStoredRecord({ ...stored(), service: "webhook" }, publicKeys)).toEqual({
      verified: false,
      reason: "signing key not known",
    });
  });
});
