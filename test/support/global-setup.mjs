// Runs once before the suite (from the compiled local-stack package: `npm test` builds first).
import { ensureTestInfra, testKafkaBrokers, testKafkaUsers, testMongoUri } from "../../deploy/local/dist/test-infra.js";

export default async function globalSetup() {
  const started = await ensureTestInfra();
  process.env.TEST_INFRA_STARTED = started ? "1" : "";
  process.env.TEST_MONGODB_URI = testMongoUri();
  process.env.TEST_KAFKA_BROKERS = testKafkaBrokers();
  process.env.TEST_KAFKA_USERS = JSON.stringify(testKafkaUsers());
  process.env.KAFKAJS_NO_PARTITIONER_WARNING = "1";
}
