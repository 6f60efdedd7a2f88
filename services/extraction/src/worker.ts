import { fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { eventsv1, fileintakev1 } from "@pi/proto";
import { consume, type Consuming } from "@pi/common/background/consume";
import { every } from "@pi/common/background/periodic";
import { consumerGroup, topicName } from "@pi/common/events/topics";
import { extractionDuration, extractions, secondsSince } from "@pi/common/runtime/metrics";
import { keepAlive } from "@pi/common/background/lease";
import { retry } from "@pi/common/background/retry";
import type { Extracted } from "@pi/common/rules/extracted";
import type { FileIntakeClient } from "@pi/common/rpc/clients";
import type { Kafka } from "@pi/common/events/kafka";
import type { Logger } from "@pi/common/runtime/logger";
import { ExtractorDied } from "./extractor.js";

export interface WorkerTiming {
  /** How long a worker holds a file without a heartbeat. */
  leaseMs: number;
  heartbeatMs: number;
  /** A file still `received` this long after it was accepted is taken by the sweep. */
  stuckAfterMs: number;
  /** A file taken more often than this (its extractor died every time) fails. */
  maxAttempts: number;
}

export type Extract = (mediaType: string, bytes: Uint8Array) => Promise<Extracted>;

export type Processed = "processed" | "failed" | "skipped" | "died";

type Taken = fileintakev1.TakeFileForExtractionResponse;

const LEGACY_RETRY_MS = 60_000;

/** Take (a lease and a durable attempt), read, extract, record; a worker killed mid-file leaves the lease to run out. */
export class ExtractionWorker {
  private legacyUntil = 0;

  constructor(
    private readonly intake: FileIntakeClient,
    private readonly timing: WorkerTiming,
    private readonly logger: Logger,
    private readonly extract: Extract,
  ) {}

  /** For a while after a file-intake of an earlier release had no TakeNextFileForExtraction: files go by their events. */
  get legacy(): boolean {
    return Date.now() < this.legacyUntil;
  }

  /** Takes the next file, fairly across partners, and extracts it; "none" when no file waits. */
  async next(): Promise<Processed | "none"> {
    if (this.legacy) {
      await this.sweepStuck();
      return "none";
    }
    const next = await this.intake
      .takeNextFileForExtraction({ leaseMs: this.timing.leaseMs, maxAttempts: this.timing.maxAttempts })
      .catch((err: unknown) => {
        if (!(err instanceof RpcError && err.code === Status.UNIMPLEMENTED)) throw err;
        this.logger.warn("file-intake takes no next file (an earlier release): files are taken by their events");
        this.legacyUntil = Date.now() + LEGACY_RETRY_MS;
        return undefined;
      });
    if (!next?.found || !next.take) return "none";
    return this.extractTaken(next.fileId, next.take);
  }

  async process(fileId: string): Promise<Processed> {
    const { leaseMs, maxAttempts } = this.timing;
    return this.extractTaken(fileId, await this.intake.takeFileForExtraction({ fileId, leaseMs, maxAttempts }));
  }

  private async extractTaken(fileId: string, take: Taken): Promise<Processed> {
    if (!take.taken) {
      return take.status === fileintakev1.FileStatus.FAILED
        ? "failed"
        : take.status === fileintakev1.FileStatus.PROCESSED
          ? "processed"
          : "skipped";
    }
    const { holder } = take;
    const started = performance.now();
    const heartbeat = keepAlive(
      `the extraction lease of ${fileId}`,
      this.timing.heartbeatMs,
      async () => (await this.intake.renewExtractionLease({ fileId, holder, leaseMs: this.timing.leaseMs })).held,
      this.logger,
    );
    try {
      // Part by part (a stored segment each, at most 1 MiB), as the transport serves no response streams.
      const parts: Uint8Array[] = [];
      for (let part = 0, count = 1; part < count; part++) {
        const res = await this.intake.readFileForExtraction({ fileId, holder, part });
        count = res.parts;
        parts.push(res.chunk);
      }
      const bytes = Buffer.concat(parts);
      parts.length = 0;
      let outcome: Extracted;
      try {
        outcome = await this.extract(take.mediaType, bytes);
      } catch (err) {
        if (!(err instanceof ExtractorDied)) throw err;
        // Not decided here: the lease runs out and the attempt stays counted.
        this.logger.warn(
          { fileId, attempt: take.attempt, err: err.message },
          "extractor died on a file; it will be taken again",
        );
        return "died";
      }
      void heartbeat.stop();
      const res = await this.intake.recordExtraction({ fileId, holder, ...recordOf(outcome) });
      if (!res.recorded) return "skipped"; // the lease ran out and another worker took over
      const status = res.status === fileintakev1.FileStatus.FAILED ? "failed" : "processed";
      extractions.inc({ outcome: status });
      extractionDuration.observe({ outcome: status }, secondsSince(started));
      return status;
    } finally {
      await heartbeat.stop();
    }
  }

  /** Takes every file left in `received` past `stuckAfterMs` (with a file-intake of an earlier release). */
  async sweepStuck(): Promise<number> {
    const { fileIds } = await this.intake.listFilesAwaitingExtraction({
      receivedBeforeMs: this.timing.stuckAfterMs,
      limit: 50,
    });
    for (const id of fileIds) await this.process(id);
    return fileIds.length;
  }
}

function recordOf(outcome: Extracted): MessageInitShape<typeof fileintakev1.RecordExtractionRequestSchema> {
  if (!outcome.ok) return { ok: false, kind: outcome.kind, error: outcome.error, failureReason: outcome.reason };
  return "textLength" in outcome ? { ...outcome, textLength: BigInt(outcome.textLength) } : outcome;
}

/** Takes files one at a time (one extraction child) until none waits: woken by file events, and every `pollMs`. */
export function takeFiles(worker: ExtractionWorker, pollMs: number, logger: Logger) {
  let stopping = false;
  const rounds = every(
    "taking files for extraction",
    pollMs,
    async () => {
      while (!stopping && (await worker.next()) !== "none");
    },
    logger,
  );
  return {
    /** A file may be waiting: take files until none waits (now, or right after the round in hand: every's runNow). */
    wake() {
      void rounds.runNow();
    },
    async stop() {
      stopping = true;
      await rounds.stop();
    },
  };
}

/** Every FileReceivedEvent wakes the taking of files; the offset moves on at once. */
export function consumeFileEvents(
  kafka: Kafka,
  namespace: string,
  worker: ExtractionWorker,
  taking: ReturnType<typeof takeFiles>,
  logger: Logger,
): Promise<Consuming> {
  return consume({
    kafka,
    logger,
    group: consumerGroup(namespace, "extraction", "files"),
    topic: topicName(namespace, "fileEvents"),
    name: "file-events",
    async each(message) {
      if (!message.value) return;
      let fileId: string;
      try {
        fileId = fromBinary(eventsv1.FileReceivedEventSchema, message.value).fileId;
      } catch (err) {
        logger.error({ err }, "unreadable file event skipped");
        return;
      }
      if (!worker.legacy) {
        taking.wake();
        return;
      }
      // With file-intake of an earlier release: this event's file, now, else the stuck sweep's.
      await retry("processing a file", () => worker.process(fileId), { attempts: 5, firstDelayMs: 200 }).catch(
        (err: unknown) => logger.warn({ err, fileId }, "file not processed; the stuck sweep will retry"),
      );
    },
  });
}
