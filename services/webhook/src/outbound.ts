import { request, type Agent } from "undici";
import { AddressRefusedError, type EgressOptions, egressAgent, readCapped } from "@pi/common/runtime/egress";
import { webhookUrlRefusal } from "@pi/common/rules/webhook-url";

// One POST through the egress of @pi/common: the registration rule again, no redirects, a few KiB of the answer read.

export interface AttemptOutcome {
  delivered: boolean;
  /** 0 when no HTTP answer came. */
  statusCode: number;
  durationMs: number;
  error?: string;
  responseExcerpt: string;
  retryAfter?: string;
}

export const noAnswer = (error: string, durationMs = 0): AttemptOutcome => ({
  delivered: false,
  statusCode: 0,
  durationMs,
  error,
  responseExcerpt: "",
});

const RESPONSE_EXCERPT_BYTES = 1024;
/** Errors that mean no answer came in time (the abort of AbortSignal.timeout, undici's own timeouts). */
const NO_ANSWER = new Set(["TimeoutError", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_ABORTED"]);

function describeError(err: unknown, timeoutMs: number): string {
  if (err instanceof AddressRefusedError) return `refused: ${err.message}`;
  const e = err as { name?: string; code?: string; message?: string; cause?: unknown };
  if (e.cause instanceof AddressRefusedError) return `refused: ${e.cause.message}`;
  if (NO_ANSWER.has(e.name ?? "") || NO_ANSWER.has(e.code ?? "")) return `no answer within ${timeoutMs / 1000} s`;
  return [e.code, e.message].filter(Boolean).join(": ") || String(err);
}

export class WebhookSender {
  /** Closed (or destroyed, cutting attempts off) by the service's stop. */
  readonly agent: Agent;

  constructor(private readonly opts: EgressOptions) {
    this.agent = egressAgent(opts);
  }

  async post(url: string, body: string, headers: Record<string, string>): Promise<AttemptOutcome> {
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    const refusal = webhookUrlRefusal(url, this.opts.allowInsecure);
    if (refusal) return noAnswer(`refused: webhook url ${refusal}`);
    try {
      const res = await request(url, {
        method: "POST",
        body,
        headers: { "content-type": "application/json", "user-agent": "pi-webhooks/1", ...headers },
        dispatcher: this.agent,
        signal: AbortSignal.timeout(this.opts.timeoutMs),
      });
      const statusCode = res.statusCode;
      // The status arrived in time; a body cut short changes nothing.
      const excerpt = await readCapped(res.body, RESPONSE_EXCERPT_BYTES).catch(() => "");
      const retryAfter = res.headers["retry-after"];
      return {
        delivered: statusCode >= 200 && statusCode < 300,
        statusCode,
        durationMs: elapsed(),
        responseExcerpt: excerpt,
        ...(typeof retryAfter === "string" ? { retryAfter } : {}),
      };
    } catch (err) {
      return noAnswer(describeError(err, this.opts.timeoutMs), elapsed());
    }
  }
}
