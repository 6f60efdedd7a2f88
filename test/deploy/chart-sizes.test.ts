// Sizes that agree (docs/files.md, "Store-wide high-water mark"; docs/security.md, "Stores a partner
// can grow"): the chart refuses values under which one partner could fill file-intake's database or
// the topics could outgrow Kafka's volume, and creates every topic with the retention topics.ts
// declares. Rendered with the real helm binary, as test/deploy/chart.test.ts.
import { beforeAll, describe, expect, it } from "@jest/globals";
import { ensureHelm } from "../../deploy/checks/helm.mjs";
import * as chart from "../../deploy/checks/chart.mjs";
import type { K8sObject } from "../../deploy/checks/chart.mjs";
import {
  SEGMENT_BYTES,
  SEGMENT_MS,
  TOPIC_RETENTION_MS,
  TOPICS,
  topicName,
} from "../../services/common/src/events/topics.js";

const { RELEASE, find } = chart;
const GiB = 1024 ** 3;
let helm: string;

beforeAll(() => {
  helm = ensureHelm();
}, 10 * 60_000);

const template = (values: unknown) => chart.helmTemplate(helm, values);
const volumeOf = (docs: K8sObject[], component: string) =>
  find(docs, "StatefulSet", `${RELEASE}-${component}-mongodb`).spec.volumeClaimTemplates[0].spec.resources.requests
    .storage;

describe("the chart refuses sizes that disagree", () => {
  it("the default values render: file-intake's database has a volume of its own, sized for the store's high-water mark", () => {
    const t = template({});
    expect(t.stderr).toBe("");
    expect(t.code).toBe(0);
    expect(volumeOf(t.docs, "file-intake")).toBe("8Gi");
    expect(volumeOf(t.docs, "auth")).toBe("2Gi");
  });

  it("refuses a storage quota that cannot fit under the store's high-water mark (one partner could fill the store)", () => {
    const t = template({ config: { FILE_STORAGE_QUOTA_BYTES: 6 * GiB } });
    expect(t.code).not.toBe(0);
    expect(t.stderr).toContain("cannot fit under FILE_STORE_HIGH_WATER_BYTES");
    // file-intake's own config block counts as well.
    expect(template({ fileIntake: { config: { TEST_FILE_STORAGE_QUOTA_BYTES: 5 * GiB } } }).stderr).toContain(
      "cannot fit under FILE_STORE_HIGH_WATER_BYTES",
    );
  });

  it("refuses a high-water mark above 80% of file-intake's database volume, and takes it once the volume is larger", () => {
    const tooHigh = template({ config: { FILE_STORE_HIGH_WATER_BYTES: 7 * GiB } });
    expect(tooHigh.code).not.toBe(0);
    expect(tooHigh.stderr).toContain("above 80% of file-intake's database volume (8Gi)");
    // The shared size applies when file-intake sets none.
    expect(template({ fileIntake: { mongodb: { persistence: { size: "" } } } }).stderr).toContain("(2Gi)");
    const bigger = template({
      config: { FILE_STORE_HIGH_WATER_BYTES: 7 * GiB },
      fileIntake: { mongodb: { persistence: { size: "9Gi" } } },
    });
    expect(bigger.stderr).toBe("");
    expect(volumeOf(bigger.docs, "file-intake")).toBe("9Gi");
    // An external database's size is not the chart's to check.
    expect(
      template({ config: { FILE_STORE_HIGH_WATER_BYTES: 7 * GiB }, mongodb: { persistence: { enabled: false } } }).code,
    ).toBe(0);
  });

  it("refuses a Kafka volume that the topics' retention could outgrow", () => {
    const t = template({ kafka: { persistence: { size: "2Gi" } } });
    expect(t.code).not.toBe(0);
    expect(t.stderr).toContain("above 80% of kafka.persistence.size (2Gi)");
  });
});

describe("every Kafka topic is bounded by retention.ms and retention.bytes", () => {
  it("the topics job of an external Kafka creates each topic with topics.ts's retention and sets it on a topic that exists", () => {
    const t = template({ kafka: { external: { brokers: "kafka.example:9092" } } });
    expect(t.stderr).toBe("");
    const job = find(t.docs, "Job", `${RELEASE}-kafka-topics`);
    const script: string = job.spec.template.spec.containers[0].command.join("\n");
    for (const key of Object.keys(TOPICS) as (keyof typeof TOPICS)[]) {
      const config = `retention.ms=${TOPIC_RETENTION_MS},retention.bytes=${TOPICS[key].retentionBytes},segment.bytes=${SEGMENT_BYTES},segment.ms=${SEGMENT_MS}`;
      const name = topicName("pi", key);
      expect(script).toContain(`--topic "${name}" --partitions ${TOPICS[key].partitions}`);
      expect(script).toContain(
        config
          .split(",")
          .map((c) => `--config ${c}`)
          .join(" "),
      );
      expect(script).toContain(`--entity-name "${name}" --add-config "${config}"`);
    }
  });
});
