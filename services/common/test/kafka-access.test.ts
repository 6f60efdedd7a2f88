import { describe, expect, it } from "@jest/globals";
import { Writable } from "node:stream";
import { AclOperations, ResourcePatternTypes, ResourceTypes } from "@platformatic/kafka";
import { createLogger } from "../src/runtime/logger.js";
import { KAFKA_ACCESS, KAFKA_USERS, kafkaAcls } from "../src/events/kafka-access.js";
import { TOPICS, topicName, type TopicKey } from "../src/events/topics.js";

const acls = kafkaAcls("ns1");
const granted = (user: string, operation: number) =>
  acls
    .filter(
      (a) => a.principal === `User:${user}` && a.operation === operation && a.resourceType === ResourceTypes.TOPIC,
    )
    .map((a) => a.resourceName)
    .sort();

describe("Kafka access: who may produce and consume what (kafka-access.ts)", () => {
  it("each topic is written by the services that publish it, and no other user", () => {
    const writers = (key: TopicKey) =>
      KAFKA_USERS.filter((u) => granted(u, AclOperations.WRITE).includes(topicName("ns1", key)));
    expect(writers("partnerEvents")).toEqual(["auth"]);
    expect(writers("connectionEvents")).toEqual(["connection"]);
    expect(writers("fileEvents")).toEqual(["file-intake"]);
    expect(writers("auditEvents").sort()).toEqual(["auth", "connection", "webhook"]);
  });

  it("the gateway writes nothing and reads only partner events", () => {
    expect(granted("gateway", AclOperations.WRITE)).toEqual([]);
    expect(granted("gateway", AclOperations.READ)).toEqual([topicName("ns1", "partnerEvents")]);
  });

  it("every user may describe and create every topic of the namespace, and nothing outside it", () => {
    const all = (Object.keys(TOPICS) as TopicKey[]).map((k) => topicName("ns1", k)).sort();
    for (const user of KAFKA_USERS) {
      expect(granted(user, AclOperations.DESCRIBE)).toEqual(all);
      expect(granted(user, AclOperations.CREATE)).toEqual(all);
    }
    expect(acls.every((a) => a.resourceName.startsWith("ns1."))).toBe(true);
  });

  it("a consumer joins only its own groups (prefix <namespace>.<service>.), a service that consumes nothing none", () => {
    const groups = acls.filter((a) => a.resourceType === ResourceTypes.GROUP);
    expect(
      groups.every(
        (g) => g.resourcePatternType === ResourcePatternTypes.PREFIXED && g.operation === AclOperations.READ,
      ),
    ).toBe(true);
    expect(groups.map((g) => [g.principal, g.resourceName]).sort()).toEqual(
      KAFKA_USERS.filter((u) => KAFKA_ACCESS[u].consumes.length > 0)
        .map((u) => [`User:${u}`, `ns1.${u}.`])
        .sort(),
    );
  });

  it("grants only ALLOW entries, never ALL or a wildcard resource", () => {
    expect(
      acls.some((a) => a.operation === AclOperations.ALL || a.resourceName === "*" || a.principal === "User:*"),
    ).toBe(false);
  });
});

describe("Kafka passwords never reach a log line", () => {
  it("the logger censors KAFKA_PASSWORD and a SASL password, wherever they sit", () => {
    let out = "";
    const destination = new Writable({
      write(chunk: Buffer, _enc, done) {
        out += chunk.toString();
        done();
      },
    });
    createLogger("auth", "info", destination).warn(
      {
        KAFKA_PASSWORD: "kp-secret-1",
        settings: { KAFKA_PASSWORD: "kp-secret-2" },
        sasl: { mechanism: "scram-sha-256", username: "auth", password: "kp-secret-3" },
      },
      "careless",
    );
    expect(out).toContain('"username":"auth"');
    expect(out).not.toMatch(/kp-secret-\d/);
  });
});
