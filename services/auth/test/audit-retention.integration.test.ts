import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient, type Db } from "mongodb";
import { createLogger } from "@pi/common/runtime/logger";
import { newId } from "@pi/common/rules/ids";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { auditDatabaseName, expireAuditRecords, openAuditStore, type AuditRecordDoc } from "../src/audit.js";
import { startAuthService } from "../src/service.js";
import { testSettings } from "../../../test/support/services.js";

// Audit records are kept AUDIT_RETENTION_SECONDS (docs/security.md, "Audit trail"): the auth
// service's sweep deletes older ones, at its start and every hour, one replica at a time, through
// an access of its own (expireAuditRecords, under its own database user in production); the appending
// store offers no removal.

const DAY = 86400;
let settings: Settings;
let mongo: MongoClient;
let db: Db;

beforeAll(async () => {
  settings = testSettings({ AUDIT_RETENTION_SECONDS: String(30 * DAY) });
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  db = mongo.db(auditDatabaseName(settings.DATA_NAMESPACE));
});
afterAll(async () => {
  await db?.dropDatabase();
  await mongo?.close();
});

const record = (daysAgo: number): AuditRecordDoc => ({
  _id: newId("evt"),
  occurredAt: new Date(Date.now() - daysAgo * DAY * 1000),
  service: "connection",
  actor: "system",
  action: "connection.expire",
  targets: [newId("con")],
  outcome: "ok",
  sequence: 0,
  partition: 0,
  offset: 0,
  storedAt: new Date(),
});

describe("audit records retention", () => {
  it("expire deletes exactly the records that occurred before the cut-off", async () => {
    const store = await openAuditStore(db);
    expect(Object.keys(store).sort()).toEqual(["append", "list"]);
    const [old, recent] = [record(40), record(20)];
    expect(await store.append([old, recent])).toBe(2);
    expect(await expireAuditRecords(db, new Date(Date.now() - 30 * DAY * 1000))).toBe(1);
    const left = await store.list({ limit: 1000 });
    expect(left.map((r) => r._id)).toContain(recent._id);
    expect(left.map((r) => r._id)).not.toContain(old._id);
  });

  it("the auth service sweeps records past AUDIT_RETENTION_SECONDS at its start, and keeps younger ones", async () => {
    const store = await openAuditStore(db);
    const [old, recent] = [record(31), record(29)];
    await store.append([old, recent]);
    let service: RunningService | undefined;
    try {
      service = await startAuthService(settings, createLogger("auth", "silent"));
      const records = db.collection<AuditRecordDoc>("audit_records");
      for (const deadline = Date.now() + 30_000; await records.findOne({ _id: old._id }); ) {
        if (Date.now() > deadline) throw new Error("the old record was not swept");
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(await records.findOne({ _id: recent._id })).not.toBeNull();
    } finally {
      await service?.stop();
    }
  });
});
