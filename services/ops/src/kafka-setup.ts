import { createServer } from "node:http";
import { ensureTopics, serviceKafka } from "@pi/common/events/kafka";
import { createLogger } from "@pi/common/runtime/logger";
import { grantKafkaAccess } from "@pi/common/events/kafka-access";
import { loadSettings } from "@pi/common/runtime/settings";
import { retry } from "@pi/common/background/retry";

// `node services/ops/dist/kafka-setup.js [--stay]`: as Kafka's super user (KAFKA_USERNAME and
// KAFKA_PASSWORD), creates the namespace's topics and grants every service's ACLs (kafka-access.ts),
// retrying until a broker answers. An SRE with an external Kafka runs it once. The chart runs it
// beside each broker with --stay: it then answers probes on KAFKA_SETUP_PROBE_PORT (9095),
// /healthz always and /readyz once the ACLs are in place (so the broker's pod is Ready only when
// the services can use it), and idles until stopped.
const settings = loadSettings();
const logger = createLogger("kafka-setup", settings.LOG_LEVEL);
const kafka = serviceKafka(settings, "kafka-setup", logger);
const stay = process.argv.includes("--stay");

let done = false;
if (stay) {
  const probes = createServer((req, res) => {
    res.statusCode = req.url === "/healthz" || (req.url === "/readyz" && done) ? 200 : 503;
    res.end();
  });
  probes.listen(Number(process.env.KAFKA_SETUP_PROBE_PORT ?? 9095));
  const stop = () => probes.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

await retry(
  "setting up Kafka's topics and ACLs",
  async () => {
    await ensureTopics(kafka, settings.DATA_NAMESPACE, undefined, { configureExisting: true });
    await grantKafkaAccess(kafka, settings.DATA_NAMESPACE);
  },
  { attempts: 120, firstDelayMs: 5_000, factor: 1, logger },
);
logger.info({ namespace: settings.DATA_NAMESPACE }, "Kafka topics and ACLs in place");
done = true;
