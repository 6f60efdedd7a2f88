import type { Db } from "mongodb";
import { checkKeys, LocalKeyWrapper, type KeyWrapper } from "../store/data-keys.js";
import { ensureTopics, kafkaReachable, serviceKafka } from "../events/kafka.js";
import type { Logger } from "./logger.js";
import { connectMongo, databaseName } from "../store/mongo.js";
import { prepareStore } from "../store/store-versions.js";
import { STORE_SCHEMAS } from "../store/migrations/index.js";
import { AuditTrail, type AuditService } from "../store/audit.js";
import { topicName } from "../events/topics.js";
import { SettingsError, type Settings } from "./settings.js";

/**
 * What every service with a database holds: that database, guarded and migrated (docs/upgrades.md)
 * before anything reads or writes it, a Kafka client, a producer and audit trails. With `dataKeys`,
 * the KEKs are checked against the ones that wrote the database (data-keys.ts, checkKeys): a key that
 * differs from the one that wrote under its id stops the start with one line naming DATA_KEYS.
 */
export async function openRuntime(
  service: keyof typeof STORE_SCHEMAS,
  settings: Settings,
  logger: Logger,
  dataKeys?: KeyWrapper,
) {
  const mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, service));
  const kafka = serviceKafka(settings, service, logger);
  const producer = kafka.producer();
  const admin = kafka.admin();
  const close = async () => {
    await Promise.allSettled([producer.disconnect(), admin.close()]);
    await mongo.close();
  };
  try {
    await prepareStore(mongo.db, STORE_SCHEMAS[service], {
      client: mongo.client,
      namespace: settings.DATA_NAMESPACE,
      logger,
    });
    if (dataKeys) await checkDataKeys(dataKeys, mongo.db, logger);
    await ensureTopics(kafka, settings.DATA_NAMESPACE);
  } catch (err) {
    await close();
    throw err;
  }
  return {
    mongo,
    kafka,
    producer,
    /** The trail of the changes this service makes, signed with its SERVICE_IDENTITY_KEY. */
    auditTrail: (auditService: AuditService) =>
      new AuditTrail({
        service: auditService,
        db: mongo.db,
        producer,
        topic: topicName(settings.DATA_NAMESPACE, "auditEvents"),
        signingKey: settings.SERVICE_IDENTITY_KEY,
        logger,
      }),
    /** The database and (unless `withKafka` is false) Kafka are reachable. */
    async healthy(withKafka = true) {
      const [db, broker] = await Promise.all([mongo.ping(), withKafka ? kafkaReachable(admin) : true]);
      return db && broker;
    },
    close,
  };
}

/** The KEKs of DATA_KEYS for a service that stores encrypted data; a missing setting stops the start with one line. */
export function dataKeysOf(settings: Settings, service: string): KeyWrapper {
  if (!settings.DATA_KEYS) throw new SettingsError(`invalid setting DATA_KEYS: required by the ${service} service`);
  return LocalKeyWrapper.fromSetting(settings.DATA_KEYS);
}

async function checkDataKeys(wrapper: KeyWrapper, db: Db, logger: Logger): Promise<void> {
  const { mismatched, missing } = await checkKeys(db, wrapper);
  if (mismatched.length > 0) {
    throw new SettingsError(
      `invalid setting DATA_KEYS: key ${mismatched.join(", ")} is not the key that wrote this service's data (was the secret generated again?); restore it, and rotate by adding a new key under a new id in front`,
    );
  }
  if (missing.length > 0)
    logger.warn({ missing }, "DATA_KEYS lacks keys that wrapped data of this service: that data cannot be read");
}
