import { connect as netConnect, type Socket } from "node:net";
import type { DescMessage, DescMethodStreaming, DescMethodUnary, MessageInitShape } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  type ContextValues,
  type Interceptor,
  type StreamResponse,
  type Transport,
  type UnaryResponse,
} from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { atMost } from "./at-most.js";
import { retryDelay } from "./background/retry.js";
import { NO_COMPRESSION } from "./connect-server.js";
import { ServiceEndpoints } from "./service-endpoints.js";

// One client Transport over every replica of a service: calls go round-robin to the replicas that
// are not known to be failing, and a call that failed for want of a replica is made again on another
// one, within the call's own deadline:
// - any call that provably never reached a server (connection refused or timed out, a stream the
//   server refused before reading it) is made again, whatever it does;
// - a call declared idempotent in its .proto (`idempotency_level`) is also made again after a
//   connection that broke under it, since doing it twice is harmless;
// - nothing else is: a non-idempotent call whose connection broke may have taken effect, so its
//   caller gets the failure (Unavailable), as does a client stream already under way, whose messages
//   are gone (the gateway answers the partner a 503; the upload is retried with its Idempotency-Key).
// An answer of the server itself (an application error, Unavailable included) is never repeated,
// except Unimplemented: only a server of another service gives it.
//
// Each replica has its own HTTP/2 connection, which gives up connecting after connectTimeoutMs, is
// checked with PING frames while in use and is closed once quiet for half the PING interval (the
// next call connects afresh), so a replica that started late, restarted or vanished without a word
// is noticed within seconds instead of holding calls until their deadlines.

export interface BalancedTransportOptions {
  /** The `*_SERVICE_URL` setting: base URLs, comma-separated; host names stand for all their addresses. */
  urls: string;
  interceptors?: Interceptor[];
  defaultTimeoutMs: number;
  connectTimeoutMs?: number;
  /** How long a replica that failed is passed over while another one is available. */
  failureCooldownMs?: number;
  /** How long a connection may be quiet before a call on it is preceded by a PING that verifies it; also the PING interval while calls are open. */
  pingIntervalMs?: number;
  /** Attempts per call at most (each on the next replica; once all are tried, after a short pause). */
  maxAttempts?: number;
  endpoints?: ServiceEndpoints;
}

interface Replica {
  origin: string;
  session: Http2SessionManager;
  transport: Transport;
  failedAt: number;
}

const NEVER_REACHED = new Set([
  "ECONNREFUSED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ECONNECTTIMEOUT",
]);

function errorCodes(err: unknown): string[] {
  const codes: string[] = [];
  for (
    let e = err, depth = 0;
    typeof e === "object" && e !== null && depth < 8;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") codes.push(code);
    const message = (e as { message?: unknown }).message;
    // A stream the server refused unread (RST_STREAM REFUSED_STREAM), or one left out of a GOAWAY.
    if (typeof message === "string" && /REFUSED_STREAM|GOAWAY/.test(message)) codes.push("ECONNREFUSED");
  }
  return codes;
}

export type CallFailure = "never-reached" | "connection-broke" | "answered";

/** What a failed attempt tells about the request: never sent, lost with its connection, or answered. */
export function classifyFailure(err: unknown): CallFailure {
  const ce = ConnectError.from(err);
  // A server that does not know the method is not a replica of this service (a stranger took the
  // address of one that died): it ran nothing, so the call goes to another replica.
  if (ce.code === Code.Unimplemented) return "never-reached";
  // A server's answer always ends with grpc-status (in the trailers, or in the headers of a
  // trailers-only answer); our own deadline is no news about the replica either.
  if (ce.metadata.has("grpc-status") || ce.code === Code.DeadlineExceeded) return "answered";
  const codes = errorCodes(err);
  if (codes.some((c) => NEVER_REACHED.has(c))) return "never-reached";
  // Anything else without a status (a reset, a stream cut short, a missing trailer) was lost on the way.
  return "connection-broke";
}

function connectTimeoutError(ms: number): Error {
  return Object.assign(new Error(`connect timed out after ${ms} ms`), { code: "ECONNECTTIMEOUT" });
}

/** A TCP connection that gives up when it is not established within `timeoutMs`. */
function connectWithTimeout(authority: URL, timeoutMs: number): Socket {
  const socket = netConnect({
    host: authority.hostname.replace(/^\[|\]$/g, ""),
    port: Number(authority.port || 80),
    noDelay: true,
    keepAlive: true,
  });
  socket.setTimeout(timeoutMs, () => socket.destroy(connectTimeoutError(timeoutMs)));
  socket.once("connect", () => socket.setTimeout(0));
  return socket;
}

type CallHeader = Parameters<Transport["unary"]>[3];

const ignore = () => {};

/**
 * connect-node's session manager, with an error listener of our own on every connection it hands a
 * stream of. It destroys an idle connection that receives GOAWAY (a replica shutting down) with an
 * error that Node.js emits only once the socket has closed; a call made in between makes the manager
 * drop its own listeners, and an 'error' nobody listens to would crash the process
 * (connectrpc/connect-es#1768; connect-node 2.3.0 keeps its listeners, but needs Node 22).
 */
class SessionManager extends Http2SessionManager {
  private readonly guarded = new WeakSet<object>();

  override async request(
    ...args: Parameters<Http2SessionManager["request"]>
  ): ReturnType<Http2SessionManager["request"]> {
    const stream = await super.request(...args);
    const connection = stream.session;
    if (connection && !this.guarded.has(connection)) {
      this.guarded.add(connection);
      connection.on("error", ignore);
    }
    return stream;
  }
}

/** A failure for want of a replica is Unavailable to the caller (a 503 at the gateway), whatever the transport said. */
function unavailable(err: unknown): ConnectError {
  const ce = ConnectError.from(err);
  return ce.code === Code.Unavailable
    ? ce
    : new ConnectError(ce.rawMessage, Code.Unavailable, ce.metadata, undefined, err);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The pause before going round the replicas again, after the `round`-th round failed on every one (the kit's backoff rule). */
const pauseAfterRound = (round: number) => retryDelay(round, { firstDelayMs: 200, factor: 2, maxDelayMs: 800 });

/** A client stream is made again on another replica only while its attempt had read at most this many messages. */
const MAX_CARRIED_MESSAGES = 4;

export class BalancedTransport implements Transport {
  private readonly endpoints: ServiceEndpoints;
  private readonly replicas = new Map<string, Replica>();
  /**
   * The round-robin position of each method. With one position for all calls, an upload's SubmitFile
   * always followed its CheckStorageQuota, so with two replicas every upload went to the same one.
   */
  private readonly next = new Map<string, number>();
  private readonly connectTimeoutMs: number;
  private readonly failureCooldownMs: number;
  private readonly maxAttempts: number;

  constructor(private readonly options: BalancedTransportOptions) {
    this.endpoints = options.endpoints ?? new ServiceEndpoints(options.urls);
    this.connectTimeoutMs = options.connectTimeoutMs ?? 1_000;
    this.failureCooldownMs = options.failureCooldownMs ?? 2_000;
    this.maxAttempts = options.maxAttempts ?? 4;
  }

  private replica(origin: string): Replica {
    let r = this.replicas.get(origin);
    if (!r) {
      const timeoutMs = this.connectTimeoutMs;
      const pingIntervalMs = this.options.pingIntervalMs ?? 5_000;
      const session = new SessionManager(
        origin,
        // A connection in use is PINGed when quiet for 5 s. One without calls is closed before it has
        // been quiet that long, so no call waits on connect-node's PING that verifies a quiet
        // connection: it never settled when the connection closed without an error meanwhile (the
        // FIN of a replica killed while nothing was in flight, read during the PING), and the call
        // waited for its deadline instead of going to another replica (connectrpc/connect-es#1746,
        // fixed in connect-node 2.2.0, which needs Node 22). The next call connects afresh: a dead
        // replica refuses it at once, a call that never reached a server goes to another one.
        { pingIntervalMs, pingTimeoutMs: 2_000, idleConnectionTimeoutMs: pingIntervalMs / 2 },
        { createConnection: (authority: URL) => connectWithTimeout(authority, timeoutMs) },
      );
      const transport = createGrpcTransport({
        baseUrl: origin,
        sessionManager: session,
        interceptors: this.options.interceptors,
        defaultTimeoutMs: this.options.defaultTimeoutMs,
        acceptCompression: NO_COMPRESSION,
      });
      r = { origin, session, transport, failedAt: 0 };
      this.replicas.set(origin, r);
    }
    return r;
  }

  /** The next replica round-robin, skipping those tried by this call; recently failed ones come last. */
  private pick(method: string, tried: Set<string>): Replica | undefined {
    const current = this.endpoints.origins();
    // Replicas whose addresses went away (pods replaced) are forgotten once nothing runs on them.
    for (const [origin, r] of this.replicas) {
      if (!current.includes(origin) && r.session.state() !== "open") {
        r.session.abort();
        this.replicas.delete(origin);
      }
    }
    const origins = current.filter((o) => !tried.has(o));
    if (origins.length === 0) return undefined;
    const now = Date.now();
    const turn = this.next.get(method) ?? 0;
    this.next.set(method, turn + 1);
    const start = turn % origins.length;
    const ordered = [...origins.slice(start), ...origins.slice(0, start)].map((o) => this.replica(o));
    // A replica whose cooldown is over is tried again even if its connection is still in error: only
    // a call reconnects it, so passing it over for as long as another one answers would leave it
    // without calls for good (a replica that was not yet listening when the caller started).
    return ordered.find((r) => now - r.failedAt >= this.failureCooldownMs) ?? ordered[0];
  }

  private failed(r: Replica, failure: CallFailure): void {
    if (failure === "answered") return;
    r.failedAt = Date.now();
    void this.endpoints.refresh();
  }

  /**
   * Runs attempts on successive replicas until one succeeds, the failure is not worth another
   * attempt, the attempts are used up or the deadline has passed.
   */
  private async withFailover<T>(
    method: string,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    retryable: (failure: CallFailure) => boolean,
    attempt: (r: Replica, remainingMs: number) => Promise<T>,
  ): Promise<T> {
    const deadline = Date.now() + (timeoutMs ?? this.options.defaultTimeoutMs);
    const remaining = () => deadline - Date.now();
    // Only until the first lookup of the service's names: every later call goes straight on.
    if (!this.endpoints.isReady()) await atMost(this.endpoints.ready(), Math.max(remaining(), 0));
    const tried = new Set<string>();
    let rounds = 0;
    let lastError: unknown;
    for (let n = 1; ; n++) {
      let r = this.pick(method, tried);
      if (!r && tried.size > 0) {
        // Every replica was tried: look the names up again, pause briefly, go round once more.
        await this.endpoints.refresh();
        await sleep(Math.min(pauseAfterRound(++rounds), Math.max(remaining() - 1, 0)));
        tried.clear();
        r = this.pick(method, tried);
      }
      if (!r) throw lastError ?? new ConnectError(`no address for ${this.options.urls}`, Code.Unavailable);
      if (remaining() <= 0)
        throw (
          lastError ?? new ConnectError("the deadline passed before a replica could be tried", Code.DeadlineExceeded)
        );
      tried.add(r.origin);
      try {
        const result = await attempt(r, remaining());
        r.failedAt = 0;
        return result;
      } catch (err) {
        // A call its caller cancelled says nothing about the replica.
        if (signal?.aborted) throw err;
        const failure = classifyFailure(err);
        this.failed(r, failure);
        // A server's own answer is passed on as it is, Unimplemented too (the method is not served
        // on this port by any replica: an admin RPC called on the data port).
        const surfaced =
          failure === "answered" || ConnectError.from(err).code === Code.Unimplemented ? err : unavailable(err);
        if (n >= this.maxAttempts || remaining() <= 0 || !retryable(failure)) throw surfaced;
        lastError = surfaced;
      }
    }
  }

  unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: CallHeader,
    input: MessageInitShape<I>,
    contextValues?: ContextValues,
  ): Promise<UnaryResponse<I, O>> {
    const idempotent = method.idempotency !== MethodOptions_IdempotencyLevel.IDEMPOTENCY_UNKNOWN;
    return this.withFailover(
      method.name,
      signal,
      timeoutMs,
      (failure) => failure === "never-reached" || (idempotent && failure === "connection-broke"),
      (r, remainingMs) => r.transport.unary(method, signal, remainingMs, header, input, contextValues),
    );
  }

  stream<I extends DescMessage, O extends DescMessage>(
    method: DescMethodStreaming<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: CallHeader,
    input: AsyncIterable<MessageInitShape<I>>,
    contextValues?: ContextValues,
  ): Promise<StreamResponse<I, O>> {
    // The input can be read once, and in order. It is read one message at a time, whichever attempt
    // asks, into `pulled`; an attempt takes first what a failed attempt before it had taken
    // (`carried`: none of it was sent), then `pulled`, so a message whose read was still pending
    // when an attempt failed goes to the next attempt in its place. A reader given up stops reading.
    // Past a few messages an attempt is no longer retried, so only that much is ever kept.
    const source = input[Symbol.asyncIterator]();
    const carried: MessageInitShape<I>[] = [];
    const pulled: MessageInitShape<I>[] = [];
    let sourceEnded = false;
    let sourceFailed: { err: unknown } | undefined;
    let reading: Promise<void> | undefined;
    const readSource = () =>
      (reading ??= source
        .next()
        .then(
          (r) => {
            if (r.done) sourceEnded = true;
            else pulled.push(r.value);
          },
          (err: unknown) => {
            sourceFailed = { err };
          },
        )
        .finally(() => {
          reading = undefined;
        }));
    let readByCurrent: MessageInitShape<I>[] = [];
    let current = 0;
    const ended = { done: true as const, value: undefined };
    const readerFor = (n: number): AsyncIterable<MessageInitShape<I>> => ({
      [Symbol.asyncIterator]: () => ({
        next: async (): Promise<IteratorResult<MessageInitShape<I>>> => {
          for (;;) {
            if (n !== current) return ended;
            const value = carried.shift() ?? pulled.shift();
            if (value !== undefined) {
              if (readByCurrent.length <= MAX_CARRIED_MESSAGES) readByCurrent.push(value);
              return { done: false, value };
            }
            if (sourceFailed) throw sourceFailed.err;
            if (sourceEnded) return ended;
            await readSource();
          }
        },
        // An attempt's reader closing, or failing, must not end the caller's input: the next attempt
        // reads on, and the caller learns of a final failure from the call itself.
        return: async () => ended,
        throw: async () => ended,
      }),
    });
    const nextAttempt = () => {
      carried.unshift(...readByCurrent);
      readByCurrent = [];
      return readerFor(++current);
    };
    let reader = readerFor(current);
    return this.withFailover(
      method.name,
      signal,
      timeoutMs,
      (failure) => {
        if (failure !== "never-reached" || readByCurrent.length > MAX_CARRIED_MESSAGES) return false;
        reader = nextAttempt();
        return true;
      },
      async (r, remainingMs) => {
        const res = await r.transport.stream(method, signal, remainingMs, header, reader, contextValues);
        // The connection may still break while the answer is read: that too is Unavailable.
        const failed = (failure: CallFailure) => this.failed(r, failure);
        async function* messages() {
          try {
            yield* res.message;
          } catch (err) {
            if (signal?.aborted) throw err;
            const failure = classifyFailure(err);
            failed(failure);
            throw failure === "answered" ? err : unavailable(err);
          }
        }
        return { ...res, message: messages() };
      },
    );
  }

  close(): void {
    this.endpoints.close();
    for (const r of this.replicas.values()) r.session.abort();
  }
}
