import {
  type Acl,
  AclOperations,
  type AclOperationValue,
  AclPermissionTypes,
  ResourcePatternTypes,
  ResourceTypes,
  type ResourceTypeValue,
} from "@platformatic/kafka";
import type { Kafka } from "./kafka.js";
import { TOPICS, topicName, type TopicKey } from "./topics.js";

/**
 * Who may do what on Kafka (docs/security.md, "Kafka"): every workload that uses Kafka has a user
 * of its own (SASL/SCRAM), and the broker's authorizer admits it only to what this table grants,
 * so that no service can publish another's events (a forged PARTNER_REINSTATED, a connection
 * event). Every user may see (DESCRIBE) and create the namespace's topics, as each service makes
 * sure they exist at start; it writes only the topics it publishes, reads only those it consumes,
 * and joins only its own consumer groups (`<namespace>.<service>.`, topics.ts consumerGroup).
 */
export const KAFKA_ACCESS = {
  gateway: { produces: [], consumes: ["partnerEvents"] },
  auth: { produces: ["partnerEvents", "auditEvents"], consumes: ["partnerEvents", "auditEvents"] },
  connection: { produces: ["connectionEvents", "auditEvents"], consumes: [] },
  "file-intake": { produces: ["fileEvents"], consumes: [] },
  extraction: { produces: [], consumes: ["fileEvents"] },
  webhook: { produces: ["auditEvents"], consumes: ["connectionEvents", "partnerEvents"] },
} as const satisfies Record<string, { produces: readonly TopicKey[]; consumes: readonly TopicKey[] }>;

export type KafkaUser = keyof typeof KAFKA_ACCESS;
export const KAFKA_USERS = Object.keys(KAFKA_ACCESS) as KafkaUser[];

/** The broker's super user: formats storage, creates users, topics and these ACLs; no service runs as it. */
export const KAFKA_ADMIN_USER = "admin";

/** The ACLs of one namespace, every user's. */
export function kafkaAcls(namespace: string): Acl[] {
  const topics = Object.keys(TOPICS) as TopicKey[];
  return KAFKA_USERS.flatMap((user) => {
    const { produces, consumes }: { produces: readonly TopicKey[]; consumes: readonly TopicKey[] } = KAFKA_ACCESS[user];
    const allow = (resourceType: ResourceTypeValue, resourceName: string, operation: AclOperationValue) => ({
      resourceType,
      resourceName,
      resourcePatternType:
        resourceType === ResourceTypes.GROUP ? ResourcePatternTypes.PREFIXED : ResourcePatternTypes.LITERAL,
      principal: `User:${user}`,
      host: "*",
      operation,
      permissionType: AclPermissionTypes.ALLOW,
    });
    const onTopics = (keys: readonly TopicKey[], operation: AclOperationValue) =>
      keys.map((key) => allow(ResourceTypes.TOPIC, topicName(namespace, key), operation));
    return [
      ...onTopics(topics, AclOperations.DESCRIBE),
      ...onTopics(topics, AclOperations.CREATE),
      ...onTopics(produces, AclOperations.WRITE),
      ...onTopics(consumes, AclOperations.READ),
      // Its own consumer groups: every group id that starts with `<namespace>.<user>.`.
      ...(consumes.length > 0 ? [allow(ResourceTypes.GROUP, `${namespace}.${user}.`, AclOperations.READ)] : []),
    ];
  });
}

/** Creates the namespace's ACLs (idempotent: the broker keeps one of each). `kafka` must be the admin user's. */
export async function grantKafkaAccess(kafka: Kafka, namespace: string): Promise<void> {
  await kafka.withAdmin((admin) => admin.createAcls({ creations: kafkaAcls(namespace) }));
}
