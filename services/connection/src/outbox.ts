import { create, toBinary } from "@bufbuild/protobuf";
import type { Collection } from "mongodb";
import type { Producer } from "@pi/common/events/kafka";
import { eventsv1 } from "@pi/proto";
import { Outbox } from "@pi/common/store/persistence";
import type { Logger } from "@pi/common/runtime/logger";
import { modeToProto } from "@pi/common/rules/mode";
import type { ConnectionDoc, OutboxEntry } from "./store.js";

const { ConnectionEventSchema } = eventsv1;

export function connectionOutbox(
  connections: Collection<ConnectionDoc>,
  producer: Pick<Producer, "send">,
  topic: string,
  logger: Logger,
): Outbox<ConnectionDoc, OutboxEntry> {
  return new Outbox<ConnectionDoc, OutboxEntry>({
    name: "connection events",
    collection: connections,
    producer,
    topic,
    logger,
    key: (doc) => doc.partnerId,
    value: (doc, entry) =>
      toBinary(
        ConnectionEventSchema,
        create(ConnectionEventSchema, {
          eventId: entry.eventId,
          type: entry.type,
          partnerId: doc.partnerId,
          connectionId: doc._id,
          status: entry.status,
          mode: modeToProto(doc.mode),
          occurredAt: BigInt(entry.occurredAt.getTime()),
        }),
      ),
    headers: (entry) => ({ "event-type": entry.type }),
    eventName: (entry) => entry.type,
  });
}
