import { create, toBinary } from "@bufbuild/protobuf";
import type { Collection } from "mongodb";
import { eventsv1 } from "@pi/proto";
import { Outbox, type OutboxEntry } from "@pi/common/store/persistence";
import { topicName } from "@pi/common/events/topics";
import type { Logger } from "@pi/common/runtime/logger";
import type { Producer } from "@pi/common/events/kafka";
import { modeToProto } from "@pi/common/rules/mode";
import type { FileDoc } from "./store.js";

/** The FileReceivedEvent of each accepted file, inserted with its record; publishing twice is harmless. */
export type FileOutbox = Outbox<FileDoc, OutboxEntry>;

export function fileOutbox(
  files: Collection<FileDoc>,
  producer: Pick<Producer, "send">,
  namespace: string,
  logger: Logger,
  sweepEveryMs?: number,
): FileOutbox {
  return new Outbox<FileDoc, OutboxEntry>({
    name: "file events",
    collection: files,
    producer,
    topic: topicName(namespace, "fileEvents"),
    logger,
    sweepEveryMs,
    key: (doc) => doc.partnerId,
    value: (doc, entry) =>
      toBinary(
        eventsv1.FileReceivedEventSchema,
        create(eventsv1.FileReceivedEventSchema, {
          fileId: doc._id,
          partnerId: doc.partnerId,
          mode: modeToProto(doc.mode),
          mediaType: doc.mediaType,
          occurredAt: BigInt(entry.occurredAt.getTime()),
        }),
      ),
  });
}
