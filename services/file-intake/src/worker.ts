import { setTimeout as sleep } from "node:timers/promises";
import { fromBinary } from "@bufbuild/protobuf";
import { eventsv1 } from "@pi/proto";
import type { KafkaMessage } from "kafkajs";
import {
  acceptedType,
  consumed,
  consumerGroup,
  CONSUMER_MAX_WAIT_MS,
  disconnectConsumer,
  endLease,
  extractionDuration,
  extractions,
  leaseFree,
  renewLease,
  secondsSince,
  takeLease,
  topicName,
  watchConsumer,
  watchConsumerLag,
  type Kafka,
  type KeyWrapper,
  type Logger,
} from "@pi/common";
import { ensureDataKey, sealExtraction } from "./at-rest.js";
import { extract as realExtract, type Extracted } from "./extraction.js";
import { readBlob } from "./staging.js";
import { EXTRACTION_LEASE, type FileDoc, type FileStatus, type FileStore } from "./store.js";

export interface WorkerTiming {
  /** How long a worker holds a file without a heartbeat; a crashed worker's file is free after it. */
  leaseMs: number;
  heartbeatMs: number;
  /** A file still `received` this long after it was accepted is taken by the sweep. */
  stuckAfterMs: number;
  /** A file taken more often than this (every take interrupted) fails without another try. */
  maxAttempts: number;
}

export type Extract = (mediaType: string, bytes: Uint8Array) => Promise<Extracted>;

/**
 * Moves files out of `received`. One take of a file is a lease on its record (a single-document
 * update), so two workers, or a worker and the sweep, never process one file at once; a crash
 * leaves the lease to run out, and the sweep takes the file again. Test files run no extraction.
 */
export class ExtractionWorker {
  constructor(
    private readonly store: FileStore,
    private readonly timing: WorkerTiming,
    private readonly logger: Logger,
    private readonly dataKeys: KeyWrapper,
    private readonly extract: Extract = realExtract,
  ) {}

  async process(fileId: string): Promise<FileStatus | "skipped"> {
    const lease = await takeLease(this.store.files, { _id: fileId, status: "received" }, EXTRACTION_LEASE, {
      ms: this.timing.leaseMs,
      update: { $set: { updatedAt: new Date() }, $inc: { attempts: 1 } },
    });
    if (!lease) return "skipped";
    const started = performance.now();
    const { doc, holder } = lease;
    const heartbeat = setInterval(() => {
      renewLease(this.store.files, fileId, EXTRACTION_LEASE, holder, this.timing.leaseMs).catch((err: unknown) => this.logger.warn({ err, fileId }, "lease heartbeat failed"));
    }, this.timing.heartbeatMs);
    heartbeat.unref();
    try {
      const outcome = await this.outcomeOf(doc);
      if (outcome) {
        // Stored sealed under the file's data key (a record from before encryption at rest gets one now).
        const key = await ensureDataKey(this.store, this.dataKeys, doc);
        await this.store.extractions.replaceOne({ _id: fileId }, sealExtraction(key, fileId, outcome, new Date()), { upsert: true });
      }
      const status: FileStatus = outcome && !outcome.ok ? "failed" : "processed";
      clearInterval(heartbeat);
      const done = new Date();
      const ended = await endLease(this.store.files, fileId, EXTRACTION_LEASE, holder, {
        filter: { status: "received" },
        update: { $set: { status, processedAt: done, updatedAt: done } },
      });
      if (!ended) return "skipped"; // the lease ran out and another worker took over
      if (outcome) {
        // Test files run none: only extractions count.
        extractions.inc({ outcome: status });
        extractionDuration.observe({ outcome: status }, secondsSince(started));
      }
      this.logger.info({ fileId, status, mode: doc.mode, mediaType: doc.mediaType, attempt: doc.attempts }, "file processed");
      return status;
    } finally {
      clearInterval(heartbeat);
    }
  }

  /** null for a test file (no extraction). Storage failures throw: the file stays for a retry. */
  private async outcomeOf(doc: FileDoc): Promise<Extracted | null> {
    if (doc.mode === "test") return null;
    const kind = acceptedType(doc.mediaType)?.extraction ?? "plain-text";
    if (doc.attempts > this.timing.maxAttempts) {
      return { ok: false, kind, error: `gave up after ${this.timing.maxAttempts} interrupted attempts` };
    }
    const bytes = await readBlob(this.store, doc, doc.dataKey ? await this.dataKeys.unwrap(doc.dataKey) : null);
    return this.extract(doc.mediaType, bytes);
  }

  /** Takes every file left in `received` past `stuckAfterMs` whose lease is free. */
  async sweepStuck(now = new Date()): Promise<number> {
    const stuck = await this.store.files
      .find(
        { status: "received", createdAt: { $lte: new Date(now.getTime() - this.timing.stuckAfterMs) }, ...leaseFree(EXTRACTION_LEASE, now) },
        { projection: { _id: 1 } },
      )
      .limit(50)
      .toArray();
    for (const { _id } of stuck) await this.process(_id);
    return stuck.length;
  }
}

/** The worker's Kafka side: every FileReceivedEvent, in the extraction consumer group. */
export async function consumeFileEvents(kafka: Kafka, namespace: string, worker: ExtractionWorker, logger: Logger) {
  const consumer = kafka.consumer({ groupId: consumerGroup(namespace, "file-intake", "extraction"), maxWaitTimeInMs: CONSUMER_MAX_WAIT_MS });
  const alive = watchConsumer(consumer, "file-events", logger);
  await consumer.connect();
  const topic = topicName(namespace, "fileEvents");
  await consumer.subscribe({ topic, fromBeginning: true });
  const lag = watchConsumerLag(kafka, consumerGroup(namespace, "file-intake", "extraction"), topic, logger);
  await consumer.run({
    eachMessage: ({ message }) => consumed(topic, 1, () => extractFrom(message)),
  });
  async function extractFrom(message: KafkaMessage): Promise<void> {
    if (!message.value) return;
    let fileId: string;
    try {
      fileId = fromBinary(eventsv1.FileReceivedEventSchema, message.value).fileId;
    } catch (err) {
      logger.error({ err }, "unreadable file event skipped");
      return;
    }
    // A storage failure is retried a few times here; after that the file stays `received` for
    // the stuck sweep, and the offset moves on.
    for (let attempt = 1; ; attempt++) {
      try {
        await worker.process(fileId);
        return;
      } catch (err) {
        if (attempt >= 5) {
          logger.warn({ err, fileId }, "file not processed; the stuck sweep will retry");
          return;
        }
        await sleep(100 * 2 ** attempt);
      }
    }
  }
  return { alive, stop: async () => void (await Promise.all([lag.stop(), disconnectConsumer(consumer, "file-events", logger)])) };
}
