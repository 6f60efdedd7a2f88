import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import { Agent, request } from "undici";
import { addressRefusal, isPublicAddress } from "./ip-policy.js";

// One POST of a webhook body to a partner's address, with the outbound safety of the chart
// (WEBHOOK_ALLOW_INSECURE_URLS=false): https only, and the address the socket connects to must be
// public. The address is checked in the socket's own DNS lookup, so a name that resolves to a
// public address when registered and to 127.0.0.1 later (DNS rebinding) is still refused.
// Redirects are never followed, and at most a few KiB of the answer are read.

export interface AttemptOutcome {
  delivered: boolean;
  /** 0 when no HTTP answer came. */
  statusCode: number;
  durationMs: number;
  error?: string;
  responseExcerpt: string;
  /** The answer's Retry-After header, if any. */
  retryAfter?: string;
}

export type Resolver = (hostname: string, options: LookupAllOptions, callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void) => void;

const systemResolver: Resolver = (hostname, options, callback) => dnsLookup(hostname, options, callback);

export class AddressRefusedError extends Error {
  readonly code = "ERR_WEBHOOK_ADDRESS_REFUSED";
}

/** A socket lookup that resolves every address of the name and keeps only the public ones. */
export function guardedLookup(resolve: Resolver = systemResolver): LookupFunction {
  return (hostname, options, callback) => {
    resolve(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, "", 0);
      const allowed = addresses.filter((a) => isPublicAddress(a.address));
      if (allowed.length === 0) {
        const found = addresses.map((a) => a.address).join(", ") || "nothing";
        return callback(new AddressRefusedError(`${hostname} resolves to no public address (${found})`), "", 0);
      }
      if (options.all) return callback(null, allowed);
      return callback(null, allowed[0]!.address, allowed[0]!.family);
    });
  };
}

export interface SenderOptions {
  allowInsecure: boolean;
  timeoutMs: number;
  /** How much of an answer's body is read and kept (1 KiB by default); the rest is dropped unread. */
  maxResponseBytes?: number;
  /** Stands in for the system's DNS in tests. */
  resolve?: Resolver;
}

/** Why the address must not be called at all, before any connection. */
export function urlRefusal(raw: string, allowInsecure: boolean): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "webhook url is not an absolute URL";
  }
  if (url.username || url.password) return "webhook url must not carry credentials";
  if (allowInsecure) return url.protocol === "https:" || url.protocol === "http:" ? undefined : "webhook url must use http or https";
  if (url.protocol !== "https:") return "webhook url must use https";
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (isIP(host)) return addressRefusal(host);
  return undefined;
}

function describeError(err: unknown, timeoutMs: number): string {
  if (err instanceof AddressRefusedError) return `refused: ${err.message}`;
  const e = err as { name?: string; code?: string; message?: string; cause?: unknown };
  if (e.cause instanceof AddressRefusedError) return `refused: ${e.cause.message}`;
  if (e.name === "AbortError" || e.code === "UND_ERR_HEADERS_TIMEOUT" || e.code === "UND_ERR_CONNECT_TIMEOUT" || e.code === "UND_ERR_ABORTED") {
    return `no answer within ${timeoutMs / 1000} s`;
  }
  return [e.code, e.message].filter(Boolean).join(": ") || String(err);
}

export class WebhookSender {
  private readonly agent: Agent;
  private readonly maxResponseBytes: number;

  constructor(private readonly opts: SenderOptions) {
    this.maxResponseBytes = opts.maxResponseBytes ?? 1024;
    this.agent = new Agent({
      connect: { timeout: opts.timeoutMs, ...(opts.allowInsecure ? {} : { lookup: guardedLookup(opts.resolve) }) },
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
      keepAliveTimeout: 4_000,
      maxRedirections: 0,
    });
  }

  async post(url: string, body: string, headers: Record<string, string>): Promise<AttemptOutcome> {
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    const refusal = urlRefusal(url, this.opts.allowInsecure);
    if (refusal) return { delivered: false, statusCode: 0, durationMs: 0, error: `refused: ${refusal}`, responseExcerpt: "" };

    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.opts.timeoutMs);
    try {
      const res = await request(url, {
        method: "POST",
        body,
        headers: { "content-type": "application/json", "user-agent": "pi-webhooks/1", ...headers },
        dispatcher: this.agent,
        signal: abort.signal,
      });
      const statusCode = res.statusCode;
      let excerpt = "";
      try {
        excerpt = await readCapped(res.body, this.maxResponseBytes);
      } catch {
        // The status arrived in time; a body cut short changes nothing.
      }
      const retryAfter = res.headers["retry-after"];
      return {
        delivered: statusCode >= 200 && statusCode < 300,
        statusCode,
        durationMs: elapsed(),
        responseExcerpt: excerpt,
        ...(typeof retryAfter === "string" ? { retryAfter } : {}),
      };
    } catch (err) {
      return { delivered: false, statusCode: 0, durationMs: elapsed(), error: describeError(err, this.opts.timeoutMs), responseExcerpt: "" };
    } finally {
      clearTimeout(timer);
    }
  }

  close(): Promise<void> {
    return this.agent.close();
  }

  /** Cuts off every request under way; each ends as an attempt without an answer. */
  destroy(): Promise<void> {
    return this.agent.destroy();
  }
}

/** Reads at most `cap` bytes of a body as text and drops the rest without reading it. */
async function readCapped(body: AsyncIterable<Buffer> & { destroy(): unknown }, cap: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= cap) break;
  }
  body.destroy();
  return Buffer.concat(chunks).subarray(0, cap).toString("utf8");
}
