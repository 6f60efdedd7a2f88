import { RpcError, Status } from "@pi/common/rpc/errors";
import type { AuthClient } from "@pi/common/rpc/clients";

// Where a partner's webhooks go and what signs them, asked of auth at each attempt (no cache to keep honest).

export interface WebhookTarget {
  url: string;
  secret: string;
  /** Secrets replaced by a rotation, each signing too until `expiresAt` (Unix ms). */
  previous: { secret: string; expiresAt: number }[];
}

export const TARGET_LOOKUP_TIMEOUT_MS = 3_000;

export function signingSecrets(target: WebhookTarget, at: number): string[] {
  return [target.secret, ...target.previous.filter((p) => p.expiresAt > at).map((p) => p.secret)];
}

/** The partner's target; null when it has no address (or is unknown). */
export async function webhookTarget(auth: AuthClient, partnerId: string): Promise<WebhookTarget | null> {
  try {
    const res = await auth.getWebhookTarget({ partnerId }, { timeoutMs: TARGET_LOOKUP_TIMEOUT_MS });
    if (!res.webhookUrl) return null;
    const previous = res.previousSigningSecrets.map((p) => ({ secret: p.secret, expiresAt: Number(p.expiresAt) }));
    return { url: res.webhookUrl, secret: res.signingSecret, previous };
  } catch (err) {
    if (err instanceof RpcError && err.code === Status.NOT_FOUND) return null;
    throw err;
  }
}
