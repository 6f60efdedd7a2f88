import kafkajs, {
  type AclEntry,
  type AclOperationTypes as AclOperation,
  type AclResourceTypes as AclResource,
  type Kafka,
} from "kafkajs";
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

// kafkajs is CommonJS, and Node finds only some of its exports by name.
const { AclOperationTypes, AclPermissionTypes, AclResourceTypes, ResourcePatternTypes } = kafkajs;

export type KafkaUser = keyof typeof KAFKA_ACCESS;
export const KAFKA_USERS = Object.keys(KAFKA_ACCESS) as KafkaUser[];

/** The broker's super user: formats storage, creates users, topics and these ACLs; no service runs as it. */
export const KAFKA_ADMIN_USER = "admin";

/** The ACLs of one namespace, every user's. */
export function kafkaAcls(namespace: string): AclEntry[] {
  const allow = (user: KafkaUser, resourceType: AclResource, resourceName: string, operation: AclOperation) => ({
    resourceType,
    resourceName,
    resourcePatternType:
      resourceType === AclResourceTypes.GROUP ? ResourcePatternTypes.PREFIXED : ResourcePatternTypes.LITERAL,
    principal: `User:${user}`,
    host: "*",
    operation,
    permissionType: AclPermissionTypes.ALLOW,
  });
  const topics = Object.keys(TOPICS) as TopicKey[];
  return KAFKA_USERS.flatMap((user) => {
    const { produces, consumes }: { produces: readonly TopicKey[]; consumes: readonly TopicKey[] } = KAFKA_ACCESS[user];
    const onTopics = (keys: readonly TopicKey[], operation: AclOperation) =>
      keys.map((key) => allow(user, AclResourceTypes.TOPIC, topicName(namespace, key), operation));
    return [
      ...onTopics(topics, AclOperationTypes.DESCRIBE),
      ...onTopics(topics, AclOperationTypes.CREATE),
      ...onTopics(produces, AclOperationTypes.WRITE),
      ...onTopics(consumes, AclOperationTypes.READ),
      // Its own consumer groups: every group id that starts with `<namespace>.<user>.`.
      ...(consumes.length > 0
        ? [allow(user, AclResourceTypes.GROUP, `${namespace}.${user}.`, AclOperationTypes.READ)]
        : []),
    ];
  });
}

/** Creates the namespace's ACLs (idempotent: the broker keeps one of each). `kafka` must be the admin user's. */
export async function grantKafkaAccess(kafka: Kafka, namespace: string): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    await admin.createAcls({ acl: kafkaAcls(namespace) });
  } finally {
    await admin.disconnect();
  }
}
