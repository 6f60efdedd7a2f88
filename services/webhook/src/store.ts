import type { Collection, Db } from "mongodb";
import type { EventType } from "./event-body.js";

// One document per webhook event holds its exact body, its delivery state, its schedule and every
// attempt, so each state change is one single-document update (no transactions needed).
//
// state      pending     due at nextAttemptAt; while an attempt runs, nextAttemptAt is the end of
//                        the lease (a replica that dies mid-attempt leaves it due again then)
//            delivered   a 2xx came within the attempt timeout
//            failed      the retry window is used up
//            no_endpoint the partner had no webhook address when the event came due; kept, never sent

export type DeliveryState = "pending" | "delivered" | "failed" | "no_endpoint";

export interface AttemptRecord {
  number: number;
  startedAt: Date;
  statusCode: number;
  durationMs: number;
  error?: string;
  responseExcerpt: string;
}

export interface WebhookEventDoc {
  _id: string; // evt_...
  sourceEventId: string; // unique: one webhook event per connection event, however often Kafka redelivers it
  partnerId: string;
  connectionId: string;
  mode: "live" | "test";
  type: EventType;
  /** The exact body every attempt sends. */
  body: string;
  createdAt: Date;
  state: DeliveryState;
  attempts: number;
  attemptLog: AttemptRecord[];
  /** null once no attempt is scheduled. */
  nextAttemptAt: Date | null;
  /** Set while an attempt is leased; only the holder may record its result. */
  leaseToken: string | null;
  deliveredAt?: Date;
}

/**
 * The right to make the attempt scheduled for one slot of one event: `${eventId}:${attempts}:${nextAttemptAt}`.
 * Inserting it is the claim. An insert with a given _id succeeds exactly once, which holds on
 * FerretDB v1 too, where a findOneAndUpdate or conditional updateOne is not atomic between
 * concurrent clients (two of them can both "match" the same document).
 */
export interface ClaimDoc {
  _id: string;
  eventId: string;
  expiresAt: Date;
}

export interface WebhookStore {
  events: Collection<WebhookEventDoc>;
  claims: Collection<ClaimDoc>;
}

export async function openWebhookStore(db: Db): Promise<WebhookStore> {
  const events = db.collection<WebhookEventDoc>("webhook_events");
  await events.createIndex({ sourceEventId: 1 }, { unique: true, name: "source_event_unique" });
  await events.createIndex({ state: 1, nextAttemptAt: 1 }, { name: "due" });
  await events.createIndex({ partnerId: 1, createdAt: -1 }, { name: "by_partner" });
  const claims = db.collection<ClaimDoc>("webhook_claims");
  await claims.createIndex({ expiresAt: 1 }, { name: "expiry" });
  return { events, claims };
}
