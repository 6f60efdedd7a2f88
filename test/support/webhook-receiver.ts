// A partner's webhook receiver, as docs/webhooks.md shows it, and the harness the project's own
// tests wrap around it. The tests send every delivery through exactly this code.

// docs:begin receiver
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";

export interface WebhookEvent {
  id: string; // evt_..., the idempotency key: the same event may arrive more than once
  type: "connection.approved" | "connection.revoked";
  created: number;
  data: { connection_id: string; status: string };
}

export const TOLERANCE_SECONDS = 5 * 60;

/** Checks a Service-Signature header against the raw body, before anything parses it. */
export function verifyWebhook(
  rawBody: Buffer,
  header: string | undefined,
  secret: string,
  now = Date.now(),
): WebhookEvent {
  let t = NaN;
  const v1: string[] = [];
  for (const part of (header ?? "").split(",")) {
    const [key, value = ""] = part.trim().split("=", 2);
    if (key === "t") t = /^\d+$/.test(value) ? Number(value) : NaN;
    if (key === "v1" && /^[0-9a-f]{64}$/.test(value)) v1.push(value);
  }
  if (Number.isNaN(t) || v1.length === 0) throw new Error("malformed Service-Signature header");
  if (Math.abs(now / 1000 - t) > TOLERANCE_SECONDS) throw new Error("timestamp outside the tolerance");
  const expected = createHmac("sha256", secret).update(`${t}.`).update(rawBody).digest();
  if (!v1.some((sig) => timingSafeEqual(Buffer.from(sig, "hex"), expected))) throw new Error("signature mismatch");
  return JSON.parse(rawBody.toString("utf8")) as WebhookEvent;
}

/**
 * Answers 400 to anything unsigned, 2xx once onEvent has handled the event, 500 when it throws
 * (the service then tries again later with the same event id and the same body).
 */
export function createWebhookReceiver(
  secret: string,
  onEvent: (event: WebhookEvent) => Promise<void> | void,
  onRejected?: (reason: string) => void,
): Server {
  return createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", async () => {
      let event: WebhookEvent;
      try {
        event = verifyWebhook(Buffer.concat(chunks), req.headers["service-signature"] as string | undefined, secret);
      } catch (err) {
        onRejected?.((err as Error).message);
        res.writeHead(400).end();
        return;
      }
      try {
        await onEvent(event); // dedupe on event.id here
        res.writeHead(204).end();
      } catch {
        res.writeHead(500).end();
      }
    });
  });
}
// docs:end receiver

import type { IncomingMessage, ServerResponse } from "node:http";
import { Waiters } from "./waiters.js";

// ---- Test harness: a receiver on 127.0.0.1, port 0, recording every delivery ----

export interface Arrival {
  event: WebhookEvent;
  /** The raw body as it arrived. */
  raw: string;
  /** How many times this event id has arrived, this one included. */
  nth: number;
  at: number;
  /** What onEvent did: answered 2xx, threw (500), or never returned (no answer). */
  outcome: "ok" | "fail" | "hang";
}

/** What the receiver does with the nth arrival of an event. */
export type Behaviour = (event: WebhookEvent, nth: number) => "ok" | "fail" | "hang";

export interface TestReceiver {
  url: string;
  /** Verifies with this secret from now on (for a receiver started before its partner existed). */
  useSecret(secret: string): void;
  arrivals: Arrival[];
  rejected: string[];
  /** Changes what the receiver does from now on. */
  behave(b: Behaviour): void;
  /** Resolves once `predicate` holds for the arrivals so far. */
  waitFor(predicate: (arrivals: Arrival[]) => boolean, timeoutMs?: number, what?: string): Promise<Arrival[]>;
  /**
   * Resolves once no client holds a connection to the receiver: everything a sender that has gone
   * away (a killed process) wrote has been read, so no arrival of its is still on its way.
   */
  drained(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startTestReceiver(secret = "", behaviour: Behaviour = () => "ok"): Promise<TestReceiver> {
  const arrivals: Arrival[] = [];
  const rejected: string[] = [];
  const counts = new Map<string, number>();
  const waiters = new Waiters();
  let current = behaviour;
  let raw = "";
  const onEvent = async (event: WebhookEvent) => {
    const nth = (counts.get(event.id) ?? 0) + 1;
    counts.set(event.id, nth);
    const outcome = current(event, nth);
    arrivals.push({ event, raw, nth, at: Date.now(), outcome });
    waiters.wake();
    if (outcome === "fail") throw new Error("told to fail");
    if (outcome === "hang") await new Promise(() => {});
  };
  const onRejected = (reason: string) => {
    rejected.push(reason);
    waiters.wake();
  };
  // The documented receiver does the work; this server only hands it each request, so the secret
  // can be set once the partner exists.
  let handle = createWebhookReceiver(secret, onEvent, onRejected).listeners("request")[0] as (
    req: IncomingMessage,
    res: ServerResponse,
  ) => void;
  const server = createServer((req, res) => handle(req, res));
  // Keeps the raw body of the request being handled, to compare bodies across attempts.
  server.prependListener("request", (req) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.prependListener("end", () => {
      raw = Buffer.concat(chunks).toString("utf8");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/webhooks`,
    useSecret(s) {
      handle = createWebhookReceiver(s, onEvent, onRejected).listeners("request")[0] as typeof handle;
    },
    arrivals,
    rejected,
    behave(b) {
      current = b;
    },
    async waitFor(predicate, timeoutMs = 20_000, what = "webhook arrivals") {
      await waiters.until(
        () => predicate(arrivals),
        timeoutMs,
        () =>
          new Error(
            `timed out after ${timeoutMs} ms waiting for ${what}; got ${arrivals.length} arrivals, ${rejected.length} rejected`,
          ),
      );
      return arrivals;
    },
    async drained(timeoutMs = 10_000) {
      const open = () =>
        new Promise<number>((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
      for (const deadline = Date.now() + timeoutMs; (await open()) > 0; ) {
        if (Date.now() > deadline) throw new Error(`the receiver still has connections after ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
