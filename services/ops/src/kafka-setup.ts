import { createKafka, createLogger, ensureTopics, grantKafkaAccess, kafkaCredentials, loadSettings } from "@pi/common";

// `node services/ops/dist/kafka-setup.js [--stay]`: as Kafka's super user (KAFKA_USERNAME and
// KAFKA_PASSWORD), creates the namespace's topics and grants every service's ACLs (kafka-access.ts),
// retrying until a broker answers. The chart runs it beside each Kafka broker (--stay: then idles,
// so the pod stays Ready); an SRE with an external Kafka may run it once.
const settings = loadSettings();
const logger = createLogger("kafka-setup", settings.LOG_LEVEL);
const kafka = createKafka(settings.KAFKA_BROKERS, `${settings.DATA_NAMESPACE}.kafka-setup`, logger, kafkaCredentials(settings));

for (let attempt = 1; ; attempt++) {
  try {
    await ensureTopics(kafka, settings.DATA_NAMESPACE);
    await grantKafkaAccess(kafka, settings.DATA_NAMESPACE);
    logger.info({ namespace: settings.DATA_NAMESPACE }, "Kafka topics and ACLs in place");
    break;
  } catch (err) {
    if (attempt >= 120) throw err;
    logger.warn({ err, attempt }, "Kafka not ready for the topics and ACLs yet; retrying in 5 s");
    await new Promise((resolve) => setTimeout(resolve, 5000));
  }
}
if (process.argv.includes("--stay")) {
  const stop = () => process.exit(0);
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  setInterval(() => {}, 2 ** 31 - 1);
}
