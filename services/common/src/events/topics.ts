// Every Kafka topic of the system, declared once. Payloads are protobuf messages of
// proto/pi/events/v1/events.proto, serialised as binary; the key is the partner id, so one
// partner's events stay in order (audit records: the id of the document that carried them).
//
// Every topic is bounded in time and size (docs/security.md, "Stores a partner can grow", has the
// arithmetic): a week, and `retentionBytes` per partition, whichever comes first. Kafka deletes
// whole segments, so segments roll at SEGMENT_BYTES or a day and a partition holds at most
// retentionBytes + SEGMENT_BYTES. The chart's topics (pi.topics) mirror these numbers.
const DAY_MS = 86_400_000;
const MiB = 1024 ** 2;
export const TOPIC_RETENTION_MS = 7 * DAY_MS;
export const SEGMENT_BYTES = 32 * MiB;
export const SEGMENT_MS = DAY_MS;

export const TOPICS = {
  connectionEvents: { name: "connection-events", partitions: 3, retentionBytes: 128 * MiB },
  fileEvents: { name: "file-events", partitions: 3, retentionBytes: 128 * MiB },
  partnerEvents: { name: "partner-events", partitions: 1, retentionBytes: 64 * MiB },
  auditEvents: { name: "audit-events", partitions: 3, retentionBytes: 512 * MiB },
} as const;

export type TopicKey = keyof typeof TOPICS;

export function topicName(namespace: string, key: TopicKey): string {
  return `${namespace}.${TOPICS[key].name}`;
}

/** The topic-level settings every topic is created (and, by an admin, kept) with. */
export function topicConfig(key: TopicKey): { name: string; value: string }[] {
  return [
    { name: "retention.ms", value: String(TOPIC_RETENTION_MS) },
    { name: "retention.bytes", value: String(TOPICS[key].retentionBytes) },
    { name: "segment.bytes", value: String(SEGMENT_BYTES) },
    { name: "segment.ms", value: String(SEGMENT_MS) },
  ];
}

export function consumerGroup(namespace: string, service: string, purpose = "main"): string {
  return `${namespace}.${service}.${purpose}`;
}
