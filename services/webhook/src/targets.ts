import { RpcError, Status } from "@pi/common/rpc/errors";
import { eventsv1 } from "@pi/proto";
import { followPartnerEvents, type PartnerEventFeed } from "@pi/common/events/partner-event-feed";
import type { AuthClient } from "@pi/common/rpc/clients";
import type { Kafka } from "@pi/common/events/kafka";
import type { Logger } from "@pi/common/runtime/logger";

// Where a partner's webhooks go and what signs them, asked of auth and kept for a minute: a
// WEBHOOK_CHANGED partner event drops the entry at once, the minute bounds a missed one.

export interface WebhookTarget {
  url: string;
  secret: string;
  /** Secrets replaced by a rotation, each signing too until `expiresAt` (Unix ms). */
  previous: { secret: string; expiresAt: number }[];
}

export function signingSecrets(target: WebhookTarget, at: number): string[] {
  return [target.secret, ...target.previous.filter((p) => p.expiresAt > at).map((p) => p.secret)];
}

interface Entry {
  target: WebhookTarget | null;
  until: number;
}

export class TargetCache {
  private readonly entries = new Map<string, Entry>();
  private readonly inflight = new Map<string, Promise<WebhookTarget | null>>();
  // Bumped by forget(), so a lookup that started before a change never stores its stale answer.
  private readonly generations = new Map<string, number>();

  constructor(
    private readonly auth: AuthClient,
    private readonly ttlMs = 60_000,
    private readonly lookupTimeoutMs = 3_000,
  ) {}

  async get(partnerId: string): Promise<WebhookTarget | null> {
    const entry = this.entries.get(partnerId);
    if (entry && entry.until > Date.now()) return entry.target;
    const pending = this.inflight.get(partnerId);
    if (pending !== undefined) return pending;
    const generation = this.generations.get(partnerId) ?? 0;
    const lookup = this.fetch(partnerId)
      .then((target) => {
        if ((this.generations.get(partnerId) ?? 0) === generation)
          this.entries.set(partnerId, { target, until: Date.now() + this.ttlMs });
        return target;
      })
      .finally(() => this.inflight.delete(partnerId));
    this.inflight.set(partnerId, lookup);
    return lookup;
  }

  forget(partnerId: string): void {
    this.generations.set(partnerId, (this.generations.get(partnerId) ?? 0) + 1);
    this.entries.delete(partnerId);
    this.inflight.delete(partnerId);
  }

  private async fetch(partnerId: string): Promise<WebhookTarget | null> {
    try {
      const res = await this.auth.getWebhookTarget({ partnerId }, { timeoutMs: this.lookupTimeoutMs });
      if (!res.webhookUrl) return null;
      const previous = (res.previousSigningSecrets ?? []).map((p) => ({
        secret: p.secret,
        expiresAt: Number(p.expiresAt),
      }));
      return { url: res.webhookUrl, secret: res.signingSecret, previous };
    } catch (err) {
      if (err instanceof RpcError && err.code === Status.NOT_FOUND) return null;
      throw err;
    }
  }
}

export function applyPartnerEvent(
  cache: Pick<TargetCache, "forget">,
  event: eventsv1.PartnerEvent,
  logger: Logger,
): void {
  if (event.kind !== eventsv1.PartnerEventKind.WEBHOOK_CHANGED) return;
  cache.forget(event.partnerId);
  logger.info({ partnerId: event.partnerId }, "webhook target changed");
}

/** Every replica follows the partner events from their end; auth does not wait for it (no position reported). */
export function followWebhookChanges(
  cache: TargetCache,
  kafka: Kafka,
  namespace: string,
  logger: Logger,
): Promise<PartnerEventFeed> {
  return followPartnerEvents({
    kafka,
    namespace,
    service: "webhook",
    logger,
    apply: (event) => applyPartnerEvent(cache, event, logger),
  });
}
