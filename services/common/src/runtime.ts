import type { Admin, Kafka, Producer } from "kafkajs";
import { createKafka, createProducer, ensureTopics, kafkaReachable } from "./kafka.js";
import type { Logger } from "./logger.js";
import { connectMongo, databaseName, type Mongo } from "./mongo.js";
import type { Settings } from "./settings.js";

/** What every internal service holds: its own database, a Kafka client, a producer. */
export interface ServiceRuntime {
  service: string;
  settings: Settings;
  logger: Logger;
  mongo: Mongo;
  kafka: Kafka;
  producer: Producer;
  healthy(): Promise<boolean>;
  close(): Promise<void>;
}

export async function openRuntime(service: string, settings: Settings, logger: Logger): Promise<ServiceRuntime> {
  const mongo = await connectMongo(settings.MONGODB_URI, databaseName(settings.DATA_NAMESPACE, service));
  const kafka = createKafka(settings.KAFKA_BROKERS, `${settings.DATA_NAMESPACE}.${service}`, logger);
  await ensureTopics(kafka, settings.DATA_NAMESPACE);
  const producer = createProducer(kafka);
  await producer.connect();
  const admin: Admin = kafka.admin();
  await admin.connect();
  return {
    service,
    settings,
    logger,
    mongo,
    kafka,
    producer,
    async healthy() {
      const [db, broker] = await Promise.all([mongo.ping(), kafkaReachable(admin)]);
      return db && broker;
    },
    async close() {
      await Promise.allSettled([producer.disconnect(), admin.disconnect()]);
      await mongo.close();
    },
  };
}
