import { describe, expect, it } from "@jest/globals";
import { create } from "@bufbuild/protobuf";
import { authv1, eventsv1 } from "@pi/proto";
import { AUDIT_NOT_CHECKED, commands, parseLimit, UsageError, type OpsClients } from "../src/commands.js";

// `ops audit`: what it asks the auth service and what it prints (docs/security.md, "Audit trail").

function withRecords(
  records: eventsv1.AuditRecord[],
  verifications: { verified: boolean; reason: string }[] = records.map(() => ({ verified: true, reason: "verified" })),
) {
  const asked: authv1.ListAuditRecordsRequest[] = [];
  const auth = {
    listAuditRecords: async (req: authv1.ListAuditRecordsRequest) => {
      asked.push(req);
      return create(authv1.ListAuditRecordsResponseSchema, {
        records,
        verifications: verifications.map((v) => create(authv1.AuditRecordVerificationSchema, v)),
      });
    },
  };
  return { ops: commands({ auth } as unknown as OpsClients), asked };
}

describe("ops audit", () => {
  it("prints the records it is given, in the order given (newest first), with ISO times and null for no reason", async () => {
    const { ops, asked } = withRecords([
      create(eventsv1.AuditRecordSchema, {
        id: "evt_b",
        occurredAt: 1_700_000_001_000n,
        service: "connection",
        actor: "ptr_p",
        action: "connection.delete",
        targets: ["con_c", "ptr_p"],
        outcome: eventsv1.AuditOutcome.OK,
      }),
      create(eventsv1.AuditRecordSchema, {
        id: "evt_a",
        occurredAt: 1_700_000_000_000n,
        service: "connection",
        actor: "caregiver",
        action: "connection.sever",
        targets: ["con_c"],
        outcome: eventsv1.AuditOutcome.REFUSED,
        reason: "failed_precondition: the connection is pending; only an approved connection can be severed",
      }),
    ]);
    const out = await ops.audit({ since: "2023-11-14T00:00:00Z", target: "con_c", limit: "2" });
    expect(asked).toEqual([
      expect.objectContaining({ since: BigInt(Date.parse("2023-11-14T00:00:00Z")), target: "con_c", limit: 2 }),
    ]);
    expect(out).toEqual({
      records: [
        {
          id: "evt_b",
          occurred_at: "2023-11-14T22:13:21.000Z",
          actor: "ptr_p",
          action: "connection.delete",
          targets: ["con_c", "ptr_p"],
          outcome: "ok",
          reason: null,
          service: "connection",
          verified: true,
          verification: "verified",
        },
        {
          id: "evt_a",
          occurred_at: "2023-11-14T22:13:20.000Z",
          actor: "caregiver",
          action: "connection.sever",
          targets: ["con_c"],
          outcome: "refused",
          reason: "failed_precondition: the connection is pending; only an approved connection can be severed",
          service: "connection",
          verified: true,
          verification: "verified",
        },
      ],
    });
  });

  it("says of each record whether its signature verified on this read, and why not; an auth service that sends no verification is reported as not checked", async () => {
    const records = ["evt_a", "evt_b", "evt_c"].map((id) =>
      create(eventsv1.AuditRecordSchema, {
        id,
        occurredAt: 1_700_000_000_000n,
        service: "auth",
        actor: "operator",
        action: "partner.create",
        targets: ["ptr_p"],
        outcome: eventsv1.AuditOutcome.OK,
      }),
    );
    const checks = [
      { verified: true, reason: "verified" },
      { verified: false, reason: "signature does not match the record" },
      { verified: false, reason: "stored before signatures were kept" },
    ];
    const out = await withRecords(records, checks).ops.audit();
    expect(out.records.map((r) => [r.id, r.verified, r.verification])).toEqual([
      ["evt_a", true, "verified"],
      ["evt_b", false, "signature does not match the record"],
      ["evt_c", false, "stored before signatures were kept"],
    ]);
    const older = await withRecords(records, []).ops.audit();
    expect(older.records.map((r) => [r.verified, r.verification])).toEqual(
      records.map(() => [false, AUDIT_NOT_CHECKED]),
    );
  });

  it("without options asks for everything, 100 at most", async () => {
    const { ops, asked } = withRecords([]);
    expect(await ops.audit()).toEqual({ records: [] });
    expect(asked).toEqual([expect.objectContaining({ since: 0n, target: "", limit: 100 })]);
  });

  it.each(["0", "1001", "-3", "ten", "2.5", ""])("--limit %j is refused", (value) => {
    expect(() => parseLimit(value)).toThrow(UsageError);
  });

  it("--since must be an ISO date-time with a zone", async () => {
    const { ops, asked } = withRecords([]);
    await expect(ops.audit({ since: "yesterday" })).rejects.toThrow(UsageError);
    expect(asked).toEqual([]);
  });
});
