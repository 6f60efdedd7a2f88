import { create, toBinary } from "@bufbuild/protobuf";
import { commonv1, eventsv1 } from "@pi/proto";
import { topicName, type Logger, type Producer } from "@pi/common";
import { withDocLock } from "./doc-lock.js";
import { fileLockKey, type FileDoc, type FileStore } from "./store.js";

/**
 * The FileReceivedEvent of each accepted file, published from the file record itself: the record is
 * written with eventPending = true, so a process that dies after the 202 and before the publish
 * leaves a record the relay finds and publishes. Publishing twice is harmless (the worker takes a
 * file only while it is `received`).
 */
export class FileOutbox {
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly store: FileStore,
    private readonly producer: Producer,
    private readonly namespace: string,
    private readonly logger: Logger,
  ) {}

  /** Right after the commit; a failure is left to the relay. */
  afterCommit(doc: FileDoc): void {
    const p = this.publish(doc)
      .catch((err) => this.logger.warn({ err, fileId: doc._id }, "file event not published yet; the relay will retry"))
      .finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  async publish(doc: Pick<FileDoc, "_id" | "partnerId" | "mode" | "mediaType" | "createdAt">): Promise<void> {
    const event = create(eventsv1.FileReceivedEventSchema, {
      fileId: doc._id,
      partnerId: doc.partnerId,
      mode: doc.mode === "test" ? commonv1.Mode.TEST : commonv1.Mode.LIVE,
      mediaType: doc.mediaType,
      occurredAt: BigInt(doc.createdAt.getTime()),
    });
    await this.producer.send({
      topic: topicName(this.namespace, "fileEvents"),
      messages: [{ key: doc.partnerId, value: Buffer.from(toBinary(eventsv1.FileReceivedEventSchema, event)) }],
    });
    await withDocLock(fileLockKey(this.store, doc._id), () => this.store.files.updateOne({ _id: doc._id }, { $set: { eventPending: false } }));
  }

  /** Publishes every pending event older than `graceMs` (younger ones are still being published inline). */
  async relay(now: Date, graceMs: number): Promise<number> {
    const due = await this.store.files
      .find({ eventPending: true, createdAt: { $lte: new Date(now.getTime() - graceMs) } })
      .project<Pick<FileDoc, "_id" | "partnerId" | "mode" | "mediaType" | "createdAt">>({ partnerId: 1, mode: 1, mediaType: 1, createdAt: 1 })
      .limit(200)
      .toArray();
    for (const doc of due) await this.publish(doc);
    return due.length;
  }

  async drain(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }
}
