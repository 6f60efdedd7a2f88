import createClient from "openapi-fetch";
import { NetworkError, OAuthTokenError, PartnerApiError, type ErrorCode } from "./errors.js";
import type { components, paths } from "./gen/api.js";
import { RETRYABLE_STATUSES, retryAfterSeconds, retryDelayMs, sleep, type RetryOptions } from "./retry.js";
import { TokenSource, type TokenSourceOptions } from "./token.js";

export type Connection = components["schemas"]["Connection"];
export type FileReceipt = components["schemas"]["File"];
export type EventList = components["schemas"]["EventList"];
/** An event as GET /v1/events lists it: the body its webhook deliveries carry. */
export type ListedEvent = EventList["data"][number];

export interface EventsOptions {
  /** Only events of this type. */
  type?: ListedEvent["type"];
  /** Events per request, 1 to 100 (default 100: fewer requests to catch up). */
  pageSize?: number;
  /** Start after this event (an `evt_` id of yours): the events older than it. */
  startingAfter?: string;
}

export interface PartnerClientOptions extends TokenSourceOptions {
  retry?: RetryOptions;
}

export interface SendFileInput {
  /** The file's bytes. */
  file: Blob | Uint8Array;
  /** Its name, with the extension that matches its type (report.pdf). */
  filename: string;
  /** The file's media type, when `file` is not a Blob that carries one. */
  contentType?: string;
  elder: string;
  purpose?: string;
  /** Defaults to a fresh UUID per call: one per distinct file, reused by every retry of that call. */
  idempotencyKey?: string;
}

type Outcome<T> = { data?: T; error?: unknown; response: Response };

/**
 * The test helpers (test credentials only): drive one of your test connections through what its
 * caregiver, or time, would do, and get it back in its new state. With a live credential every one
 * fails with `PartnerApiError` code `not_found`; a transition the connection's status does not allow
 * fails with `invalid_request`, its status unchanged. Each is safe to repeat.
 */
export interface TestHelpers {
  /** pending -> approved at once, with the connection.approved webhook (the automatic approval then does nothing). */
  approveConnection(id: string): Promise<Connection>;
  /** The caregiver declines: it reads pending until its window ends; no event, no automatic approval. */
  declineConnection(id: string): Promise<Connection>;
  /** approved -> revoked, with the connection.revoked webhook, as the caregiver's sever. */
  severConnection(id: string): Promise<Connection>;
  /** pending (declined or not) -> expired at once, as the end of its window; no event. */
  expireConnection(id: string): Promise<Connection>;
}

/**
 * A partner's client of the API: it fetches and renews the token itself, and retries a request
 * that got no answer, a 429 (after its Retry-After) or a 503, with the same Idempotency-Key.
 */
export class PartnerClient {
  readonly tokens: TokenSource;
  /** Test mode only: see TestHelpers. */
  readonly testHelpers: TestHelpers;
  private readonly api: ReturnType<typeof createClient<paths>>;

  constructor(private readonly o: PartnerClientOptions) {
    this.tokens = new TokenSource(o);
    this.api = createClient<paths>({
      baseUrl: o.baseUrl.replace(/\/$/, ""),
      ...(o.fetch ? { fetch: (r: Request) => o.fetch!(r) } : {}),
    });
    this.api.use({
      onRequest: async ({ request }) => {
        request.headers.set("authorization", `Bearer ${await this.tokens.get()}`);
        return request;
      },
    });
    const helper = (act: "approve" | "decline" | "sever" | "expire") => (id: string) =>
      this.call(() => this.api.POST(`/v1/test_helpers/connections/{id}/${act}`, { params: { path: { id } } }));
    this.testHelpers = {
      approveConnection: helper("approve"),
      declineConnection: helper("decline"),
      severConnection: helper("sever"),
      expireConnection: helper("expire"),
    };
  }

  /** Asks to be connected to an elder; the same address always gives the same connection. */
  connect(elder: string): Promise<Connection> {
    return this.call(() => this.api.POST("/v1/connections", { body: { elder } }));
  }

  getConnection(id: string): Promise<Connection> {
    return this.call(() => this.api.GET("/v1/connections/{id}", { params: { path: { id } } }));
  }

  /** Revokes a connection (idempotent). */
  revokeConnection(id: string): Promise<Connection> {
    return this.call(() => this.api.DELETE("/v1/connections/{id}", { params: { path: { id } } }));
  }

  /** Polls a connection until it is no longer pending (approved, expired or revoked), or the time is up. */
  async waitForConnection(id: string, { intervalMs = 2_000, timeoutMs = 120_000 } = {}): Promise<Connection> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const connection = await this.getConnection(id);
      if (connection.status !== "pending" || Date.now() + intervalMs > deadline) return connection;
      await sleep(intervalMs);
    }
  }

  /** Sends one file; every retry of this call carries the same Idempotency-Key, so it is stored once. */
  sendFile(input: SendFileInput): Promise<FileReceipt> {
    const key = input.idempotencyKey ?? crypto.randomUUID();
    const blob =
      input.file instanceof Blob
        ? input.file
        : new Blob([input.file], { type: input.contentType ?? "application/octet-stream" });
    const form = new FormData();
    form.set("elder", input.elder); // before the file, so a bad address is refused before the upload
    if (input.purpose !== undefined) form.set("purpose", input.purpose);
    form.set("file", blob, input.filename);
    return this.call(() =>
      this.api.POST("/v1/files", {
        params: { header: { "Idempotency-Key": key } },
        body: {} as components["schemas"]["FileSendRequest"],
        bodySerializer: () => form,
      }),
    );
  }

  getFile(id: string): Promise<FileReceipt> {
    return this.call(() => this.api.GET("/v1/files/{id}", { params: { path: { id } } }));
  }

  /** One page of your events, newest first (GET /v1/events). */
  listEvents(query: { limit?: number; starting_after?: string; type?: ListedEvent["type"] } = {}): Promise<EventList> {
    return this.call(() => this.api.GET("/v1/events", { params: { query } }));
  }

  /**
   * Every event of yours (of the credential's mode), newest first, fetching the pages as it goes:
   * `for await (const event of client.events({ type: "connection.approved" }))`. To catch up after an
   * endpoint's outage, break once `event.created` is older than its start; no further page is fetched.
   */
  async *events(options: EventsOptions = {}): AsyncGenerator<ListedEvent, void, undefined> {
    let after = options.startingAfter;
    for (;;) {
      const page = await this.listEvents({
        limit: options.pageSize ?? 100,
        ...(after ? { starting_after: after } : {}),
        ...(options.type ? { type: options.type } : {}),
      });
      for (const event of page.data) yield event;
      const last = page.data.at(-1);
      if (!page.has_more || !last) return;
      after = last.id;
    }
  }

  private async call<T>(send: () => Promise<Outcome<T>>): Promise<T> {
    const retry = this.o.retry ?? {};
    const maxAttempts = retry.maxAttempts ?? 5;
    let renewed = false;
    for (let attempt = 1; ; attempt++) {
      let outcome: Outcome<T>;
      try {
        outcome = await send();
      } catch (err) {
        // The token request's own refusal is final; a network error (of it or of the call) is retried.
        if (err instanceof OAuthTokenError || err instanceof PartnerApiError) throw err;
        if (attempt >= maxAttempts) throw err instanceof NetworkError ? err : new NetworkError(err);
        await sleep(retryDelayMs(attempt, retry));
        continue;
      }
      const { response } = outcome;
      if (response.ok) return outcome.data as T;
      const retryAfter = retryAfterSeconds(response.headers.get("retry-after"));
      if (response.status === 401 && !renewed) {
        // A token revoked or expired early: one new token, then the same request again.
        renewed = true;
        this.tokens.invalidate();
        continue;
      }
      if (RETRYABLE_STATUSES.has(response.status) && attempt < maxAttempts) {
        await sleep(retryDelayMs(attempt, retry, retryAfter));
        continue;
      }
      const e =
        ((outcome.error ?? {}) as { error?: { code?: string; message?: string; type?: string; param?: string } })
          .error ?? {};
      throw new PartnerApiError(
        response.status,
        (e.code ?? "internal_error") as ErrorCode,
        e.message ?? `HTTP ${response.status}`,
        e.type ?? "api_error",
        e.param,
        retryAfter,
      );
    }
  }
}
