import type { Document } from "mongodb";
import { databaseName } from "../mongo.js";
import { insertNew } from "../persistence.js";
import type { StoreMigration } from "../store-versions.js";

// auth 0001 (docs/upgrades.md): copies each record 4e36e67 kept in `<ns>_auth.audit_records`, exactly
// as stored, into the trail's own database, insert only (a record already there is left as it is),
// then drops the old collection. Stopped anywhere, the next run copies what is left.

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
    const cursor = from.find({}).sort({ _id: 1 }).batchSize(BATCH);
    while (await cursor.hasNext()) {
      const batch = cursor.readBufferedDocuments();
      seen += batch.length;
      copied += batch.length - (await insertNew(to, batch)).length;
    }
    if (seen > 0)
      await from.drop().catch((err: { code?: number }) => {
        if (err.code !== 26) throw err; // already gone (NamespaceNotFound)
      });
    logger.info({ seen, copied }, "audit records of 4e36e67 copied into the trail's database");
  },
};
