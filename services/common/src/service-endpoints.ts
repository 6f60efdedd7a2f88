import { lookup as dnsLookup } from "node:dns/promises";
import { isIP } from "node:net";
import { every, type Periodic } from "./background/periodic.js";
import { createLogger } from "./logger.js";

// The addresses of one internal service. A `*_SERVICE_URL` setting is one base URL or a
// comma-separated list of them (the local stack lists its replicas); a host name in it stands for
// every address it resolves to (in Kubernetes a headless Service's name resolves to its ready pods),
// looked up again periodically so that replicas that come and go are followed.

export type Lookup = (hostname: string) => Promise<string[]>;

const lookupAll: Lookup = async (hostname) =>
  (await dnsLookup(hostname, { all: true, verbatim: true })).map((a) => a.address);

/** Splits and checks a `*_SERVICE_URL` value; throws with a one-line reason. */
export function parseServiceUrls(value: string): URL[] {
  const parts = value.split(",").map((p) => p.trim());
  if (parts.some((p) => p === "")) throw new Error("must be one URL or a comma-separated list of URLs");
  return parts.map((part) => {
    let url: URL;
    try {
      url = new URL(part);
    } catch {
      throw new Error(`${JSON.stringify(part)} is not a URL`);
    }
    if (url.protocol !== "http:") throw new Error(`${JSON.stringify(part)} must be an http:// (h2c) URL`);
    if (url.pathname !== "/" || url.search || url.hash || url.username || url.password)
      throw new Error(`${JSON.stringify(part)} must be a base URL (scheme, host, port)`);
    return url;
  });
}

/** The origin of one address of a URL's host: http://10.1.2.3:50051, http://[fd00::1]:50051. */
function originFor(url: URL, address: string): string {
  const host = isIP(address) === 6 ? `[${address}]` : address;
  return `${url.protocol}//${host}${url.port ? `:${url.port}` : ""}`;
}

const literalHost = (url: URL) => isIP(url.hostname.replace(/^\[|\]$/g, "")) !== 0;

export interface ServiceEndpointsOptions {
  /** How often host names are looked up again. */
  resolveEveryMs?: number;
  /** A lookup on demand (every address failing) happens at most this often. */
  minResolveGapMs?: number;
  lookup?: Lookup;
}

/**
 * The current origins of a service. IP literals are taken as they are; host names are resolved to all
 * their addresses, again every `resolveEveryMs` and when asked (every known address failing). A
 * failed lookup keeps the addresses known before it.
 */
export class ServiceEndpoints {
  private readonly urls: URL[];
  private readonly resolved = new Map<string, string[]>();
  private readonly lookup: Lookup;
  private readonly minResolveGapMs: number;
  /** The periodic lookup; none when every host is an IP literal. */
  private readonly lookups?: Periodic;
  private lastResolve = 0;
  private resolving?: Promise<void>;
  private first?: Promise<void>;
  private firstDone = false;

  constructor(value: string, options: ServiceEndpointsOptions = {}) {
    this.urls = parseServiceUrls(value);
    this.lookup = options.lookup ?? lookupAll;
    this.minResolveGapMs = options.minResolveGapMs ?? 500;
    if (this.urls.some((u) => !literalHost(u))) {
      // resolve() never fails (a failed lookup keeps what was known), so the kit's logger stays silent.
      this.lookups = every(
        "service address lookup",
        options.resolveEveryMs ?? 5_000,
        () => this.resolve(),
        createLogger("service-endpoints", "silent"),
        { runAtStart: false },
      );
    }
  }

  /** Every origin known now (host names count once resolved). */
  origins(): string[] {
    const out = new Set<string>();
    for (const url of this.urls) {
      if (literalHost(url)) out.add(url.origin);
      else for (const address of this.resolved.get(url.hostname) ?? []) out.add(originFor(url, address));
    }
    return [...out];
  }

  /** Settles once every host name has been looked up at least once (whatever the outcome). */
  ready(): Promise<void> {
    if (!this.lookups) return Promise.resolve();
    this.first ??= this.resolve().then(() => {
      this.firstDone = true;
    });
    return this.first;
  }

  /** Whether ready() has settled (at once for IP literals): a caller need not wait for it. */
  isReady(): boolean {
    return !this.lookups || this.firstDone;
  }

  /** Looks the host names up again, unless that happened very recently. */
  refresh(): Promise<void> {
    if (!this.lookups || Date.now() - this.lastResolve < this.minResolveGapMs)
      return this.resolving ?? Promise.resolve();
    return this.resolve();
  }

  private resolve(): Promise<void> {
    this.resolving ??= (async () => {
      this.lastResolve = Date.now();
      const names = [...new Set(this.urls.filter((u) => !literalHost(u)).map((u) => u.hostname))];
      await Promise.all(
        names.map(async (name) => {
          try {
            const addresses = await this.lookup(name);
            if (addresses.length > 0) this.resolved.set(name, addresses);
          } catch {
            // Keep what was known: a DNS hiccup must not drop replicas that still answer.
          }
        }),
      );
    })().finally(() => {
      this.resolving = undefined;
    });
    return this.resolving;
  }

  close(): void {
    void this.lookups?.stop();
  }
}
