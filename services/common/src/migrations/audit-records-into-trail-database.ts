import type { Document } from "mongodb";
import { databaseName } from "../mongo.js";
import { insertNew } from "../persistence.js";
import type { StoreMigration } from "../store-versions.js";

// auth 0001. Release 4e36e67 kept the audit trail in the auth service's own database
// (`<ns>_auth.audit_records`); since 1.0.0 it is in a database of its own (`<ns>_auth_audit`, where
// the auth service may only find, insert and create indexes: docs/security.md, "Audit trail"), and
// nothing read the old one, so `ops audit` listed none of the records written before. This copies
// each old record, exactly as stored (same id, times, fields, order keys), into the trail's
// database, then drops the old collection. A record already there is left as it is (insert only,
// as the trail itself writes). Stopped anywhere, the next run copies what is left.

const BATCH = 500;

export const auditRecordsIntoTrailDatabase: StoreMigration = {
  name: "0001-audit-records-into-the-trail-database",
  about:
    "copies the audit records 4e36e67 kept in <ns>_auth.audit_records into <ns>_auth_audit.audit_records, then drops the old collection",
  async up({ db, client, namespace, logger }) {
    const from = db.collection<Document>("audit_records");
    const to = client.db(databaseName(namespace, "auth_audit")).collection<Document>("audit_records");
    let copied = 0;
    let seen = 0;
    let batch: Document[] = [];
    const flush = async () => {
      copied += batch.length - (await insertNew(to, batch)).length;
      batch = [];
    };
    for await (const record of from.find({}).sort({ _id: 1 })) {
      seen++;
      batch.push(record);
      if (batch.length >= BATCH) await flush();
    }
    if (batch.length > 0) await flush();
    if (seen > 0)
      await from.drop().catch((err: { code?: number }) => {
        if (err.code !== 26) throw err; // already gone (NamespaceNotFound)
      });
    logger.info({ seen, copied }, "audit records of 4e36e67 copied into the trail's database");
  },
};
