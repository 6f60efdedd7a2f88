import type { Db } from "mongodb";
import { checkKeys, LocalKeyWrapper, type KeyWrapper } from "../store/data-keys.js";
import { createKafka, ensureTopics, kafkaCredentials, kafkaReachable } from "../events/kafka.js";
import type { Logger } from "./logger.js";
import { connectMongo, databaseName } from "../store/mongo.js";
import { SettingsError, type Settings } from "./settings.js";

export type ServiceRuntime = Awaited<ReturnType<typeof openRuntime>>;

/** What every internal service holds: its own database, a Kafka client, a producer. */
export async function openRuntime(service: string, settings: Settings, logger: Logger) {
  const mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, service));
  const kafka = createKafka(
    settings.KAFKA_BROKERS,
    `${settings.DATA_NAMESPACE}.${service}`,
    logger,
    kafkaCredentials(settings),
  );
  await ensureTopics(kafka, settings.DATA_NAMESPACE);
  const producer = kafka.producer();
  const admin = kafka.admin();
  return {
    service,
    settings,
    logger,
    mongo,
    kafka,
    producer,
    /** The database and (unless `withKafka` is false) Kafka are reachable. */
    async healthy(withKafka = true) {
      const [db, broker] = await Promise.all([mongo.ping(), withKafka ? kafkaReachable(admin) : true]);
      return db && broker;
    },
    async close() {
      await Promise.allSettled([producer.disconnect(), admin.disconnect()]);
      await mongo.close();
    },
  };
}

/** The KEKs of DATA_KEYS for a service that stores encrypted data; a missing setting stops the start with one line. */
export function dataKeysOf(settings: Settings, service: string): KeyWrapper {
  if (!settings.DATA_KEYS) throw new SettingsError(`invalid setting DATA_KEYS: required by the ${service} service`);
  return LocalKeyWrapper.fromSetting(settings.DATA_KEYS);
}

/**
 * Checks the KEKs against the ones that wrote the service's database (data-keys.ts, checkKeys): a
 * key that differs from the one that wrote under its id stops the start with one line naming
 * DATA_KEYS; keys that wrote here and are no longer given are logged.
 */
export async function checkDataKeys(wrapper: KeyWrapper, db: Db, logger: Logger): Promise<void> {
  const { mismatched, missing } = await checkKeys(db, wrapper);
  if (mismatched.length > 0) {
    throw new SettingsError(
      `invalid setting DATA_KEYS: key ${mismatched.join(", ")} is not the key that wrote this service's data (was the secret generated again?); restore it, and rotate by adding a new key under a new id in front`,
    );
  }
  if (missing.length > 0)
    logger.warn({ missing }, "DATA_KEYS lacks keys that wrapped data of this service: that data cannot be read");
}
