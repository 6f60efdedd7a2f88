// Every Kafka topic of the system, declared once. Payloads are protobuf messages of
// proto/pi/events/v1/events.proto, serialised as binary; the key is the partner id, so one
// partner's events stay in order (audit records: the id of the document that carried them).
export const TOPICS = {
  connectionEvents: { name: "connection-events", partitions: 3 },
  fileEvents: { name: "file-events", partitions: 3 },
  partnerEvents: { name: "partner-events", partitions: 1 },
  auditEvents: { name: "audit-events", partitions: 3 },
} as const;

export type TopicKey = keyof typeof TOPICS;

export function topicName(namespace: string, key: TopicKey): string {
  return `${namespace}.${TOPICS[key].name}`;
}

export function consumerGroup(namespace: string, service: string, purpose = "main"): string {
  return `${namespace}.${service}.${purpose}`;
}
