import {
  compactVerify,
  createLocalJWKSet,
  generateKeyPair,
  importJWK,
  SignJWT,
  type CryptoKey,
  type JWK,
  type JWTVerifyGetKey,
} from "jose";
import { LRUCache } from "lru-cache";
import { type Agent, request } from "undici";
import { egressAgent, readCapped, urlRefusal } from "@pi/common/runtime/egress";
import type { Logger } from "@pi/common/runtime/logger";
import type { Collection } from "mongodb";
import type { CredentialDoc } from "./store.js";
import {
  ASSERTION_ALGORITHMS,
  isAssertionAlgorithm,
  type AssertionAlgorithm,
  type ClaimedAssertion,
} from "./client-assertion.js";
import {
  JWKS_URL_MAX_AGE_MS,
  JWKS_URL_REFETCH_COOLDOWN_MS,
  scheduledFetchDue,
  unknownKidFetchDue,
  type RefreshTimes,
} from "./jwks-refresh.js";

// The keys that verify private_key_jwt assertions: a credential's inline JWK Set, or the set at its
// URL, fetched in the background and stored with it, so that no token request waits for a host.

/** A JWK Set's limits: what a partner needs for a rotation, and no more. */
const MAX_JWKS_KEYS = 10;
const MAX_JWKS_BYTES = 64 * 1024;

const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

export async function jwksProblem(value: unknown): Promise<string | undefined> {
  const keys = (value as { keys?: unknown } | null)?.keys;
  if (typeof value !== "object" || !Array.isArray(keys)) return "is not a JWK Set (an object with a keys array)";
  if (keys.length === 0 || keys.length > MAX_JWKS_KEYS) return `must hold 1 to ${MAX_JWKS_KEYS} keys`;
  const kids = new Set<string>();
  for (const [i, key] of keys.entries()) {
    if (typeof key !== "object" || key === null) return `key ${i} is not an object`;
    const jwk = key as JWK;
    if (PRIVATE_MEMBERS.some((m) => m in jwk)) return `key ${i} holds private key material: publish only public keys`;
    if (typeof jwk.kid !== "string" || jwk.kid === "") return `key ${i} has no kid`;
    if (kids.has(jwk.kid)) return `kid ${jwk.kid} appears twice`;
    kids.add(jwk.kid);
    if (jwk.use !== undefined && jwk.use !== "sig") return `key ${jwk.kid}: use must be sig`;
    if (jwk.alg !== undefined && !isAssertionAlgorithm(jwk.alg))
      return `key ${jwk.kid}: alg must be one of ${ASSERTION_ALGORITHMS.join(", ")}`;
    if (jwk.kty !== "RSA" && jwk.kty !== "EC") return `key ${jwk.kid}: kty must be RSA or EC`;
    if (jwk.kty === "EC" && jwk.crv !== "P-256" && jwk.crv !== "P-384")
      return `key ${jwk.kid}: crv must be P-256 or P-384`;
    if (jwk.kty === "RSA" && (typeof jwk.n !== "string" || Buffer.from(jwk.n, "base64url").length < 256))
      return `key ${jwk.kid}: RSA keys must be 2048 bits or more`;
    // importJWK refuses an alg that does not fit the key's kty or crv.
    try {
      await importJWK(jwk, jwk.alg ?? (jwk.kty === "RSA" ? "RS384" : jwk.crv === "P-256" ? "ES256" : "ES384"));
    } catch (err) {
      return `key ${jwk.kid} cannot be read: ${(err as Error).message}`;
    }
  }
  return undefined;
}

export type FetchedJwks = NonNullable<CredentialDoc["jwksFetched"]>;

export type KeySource = Pick<CredentialDoc, "_id" | "jwks" | "jwksUrl" | "jwksFetched" | "jwksFetchFailedAt">;

export type FetchOutcome = FetchedJwks | { problem: string; failedAt: Date };

export interface AssertionKeysOptions {
  allowInsecure: boolean;
  timeoutMs?: number;
  refetchCooldownMs?: number;
  record?: (url: string, outcome: FetchOutcome) => Promise<void>;
  logger?: Pick<Logger, "warn" | "info">;
}

const REFRESH_CONCURRENCY = 8;

export class AssertionKeys {
  /** jose's local set of each credential's inline set, or of its URL's set as fetched at a time. */
  private readonly sets = new LRUCache<string, JWTVerifyGetKey>({ max: 20_000 });
  /** This replica's latest fetch attempt per URL (the stored history lags while a fetch is in flight). */
  private readonly attempts = new LRUCache<string, Date>({ max: 10_000 });
  private readonly inFlight = new Set<Promise<void>>();
  private readonly agent: Agent;
  private readonly times: RefreshTimes;
  /** Per algorithm, a public key that verifies nothing anyone sent: what an assertion is checked against when its key is not found. */
  private dummies = new Map<AssertionAlgorithm, CryptoKey>();
  /** A well-formed assertion no dummy key verifies: checked instead of a malformed one. */
  private dummyAssertion = "";

  constructor(private readonly opts: AssertionKeysOptions) {
    this.times = { maxAgeMs: JWKS_URL_MAX_AGE_MS, cooldownMs: opts.refetchCooldownMs ?? JWKS_URL_REFETCH_COOLDOWN_MS };
    this.agent = egressAgent({ allowInsecure: opts.allowInsecure, timeoutMs: opts.timeoutMs ?? 5_000 });
  }

  async start(): Promise<void> {
    for (const alg of ASSERTION_ALGORITHMS) this.dummies.set(alg, (await generateKeyPair(alg)).publicKey);
    const stranger = (await generateKeyPair("ES256")).privateKey;
    this.dummyAssertion = await new SignJWT({}).setProtectedHeader({ alg: "ES256", kid: "dummy" }).sign(stranger);
  }

  async stop(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }

  async fetchSet(url: string): Promise<FetchOutcome> {
    const refusal = urlRefusal(url, this.opts.allowInsecure, "JWK Set URL");
    if (refusal) return { problem: refusal, failedAt: new Date() };
    let jwks: unknown;
    try {
      const res = await request(url, {
        headers: { accept: "application/json" },
        dispatcher: this.agent,
        signal: AbortSignal.timeout(this.opts.timeoutMs ?? 5_000),
      });
      const text = await readCapped(res.body, MAX_JWKS_BYTES + 1);
      if (res.statusCode !== 200) throw new Error(`the host answered ${res.statusCode}, not 200`);
      if (Buffer.byteLength(text) > MAX_JWKS_BYTES) throw new Error(`the set is larger than ${MAX_JWKS_BYTES} bytes`);
      jwks = JSON.parse(text);
    } catch (err) {
      return { problem: `the JWK Set URL could not be fetched: ${(err as Error).message}`, failedAt: new Date() };
    }
    const problem = await jwksProblem(jwks);
    if (problem) return { problem: `the JWK Set at the URL ${problem}`, failedAt: new Date() };
    return { jwks: jwks as FetchedJwks["jwks"], fetchedAt: new Date() };
  }

  private refresh(url: string): Promise<void> {
    this.attempts.set(url, new Date());
    const done = (async () => {
      try {
        const outcome = await this.fetchSet(url);
        if ("problem" in outcome)
          this.opts.logger?.warn(
            { jwksUrlHost: URL.parse(url)?.host, problem: outcome.problem },
            "JWK Set URL fetch failed; its clients keep the set last fetched",
          );
        await this.opts.record?.(url, outcome);
      } catch (err) {
        this.opts.logger?.warn({ err, jwksUrlHost: URL.parse(url)?.host }, "JWK Set URL fetch could not be stored");
      }
    })();
    this.inFlight.add(done);
    void done.finally(() => this.inFlight.delete(done));
    return done;
  }

  /** The scheduled round (one replica at a time): fetches each URL whose set is due (jwks-refresh.ts). */
  async refreshDue(credentials: KeySource[]): Promise<number> {
    const now = new Date();
    // A URL once, when any of its credentials is due (a failure is recorded on all of them).
    const due = new Set<string>();
    for (const c of credentials) {
      const h = { fetchedAt: c.jwksFetched?.fetchedAt, failedAt: c.jwksFetchFailedAt };
      if (c.jwksUrl && scheduledFetchDue({ ...h, attemptedAt: this.attempts.get(c.jwksUrl) }, now, this.times))
        due.add(c.jwksUrl);
    }
    const urls = [...due];
    for (let i = 0; i < urls.length; i += REFRESH_CONCURRENCY)
      await Promise.all(urls.slice(i, i + REFRESH_CONCURRENCY).map((url) => this.refresh(url)));
    return urls.length;
  }

  /** Every assertion costs one signature check (guarantee 5); an unknown kid asks for a background fetch and fails now. */
  async verify(
    assertion: string,
    claimed: ClaimedAssertion | undefined,
    credential: KeySource | undefined,
  ): Promise<Record<string, unknown> | undefined> {
    const alg = claimed?.alg ?? "ES256";
    const key = claimed && credential ? await this.keyOf(credential, claimed) : undefined;
    try {
      const { payload } = await compactVerify(
        claimed ? assertion : this.dummyAssertion,
        key ?? this.dummies.get(alg)!,
        { algorithms: [alg] },
      );
      // A claims set that is a JSON object: claimedAssertion decoded it.
      return key ? (JSON.parse(new TextDecoder().decode(payload)) as Record<string, unknown>) : undefined;
    } catch {
      return undefined;
    }
  }

  private async keyOf(credential: KeySource, claimed: ClaimedAssertion): Promise<CryptoKey | undefined> {
    const resolver = this.resolverOf(credential);
    try {
      if (resolver)
        return (await resolver({ alg: claimed.alg, kid: claimed.kid }, { payload: "", signature: "" })) as CryptoKey;
    } catch {
      // No such kid in the set, two keys of one kid, an algorithm the key does not fit.
    }
    const url = credential.jwksUrl;
    const history = { fetchedAt: credential.jwksFetched?.fetchedAt, failedAt: credential.jwksFetchFailedAt };
    if (url && unknownKidFetchDue({ ...history, attemptedAt: this.attempts.get(url) }, new Date(), this.times))
      void this.refresh(url);
    return undefined;
  }

  private resolverOf(credential: KeySource): JWTVerifyGetKey | undefined {
    const jwks = credential.jwks ?? (credential.jwksUrl ? credential.jwksFetched?.jwks : undefined);
    if (!jwks) return undefined;
    const key = `${credential._id}\u0000${credential.jwks ? "inline" : credential.jwksFetched!.fetchedAt.getTime()}`;
    if (!this.sets.has(key)) this.sets.set(key, createLocalJWKSet(jwks));
    return this.sets.get(key);
  }
}

export async function recordJwksFetch(
  credentials: Collection<CredentialDoc>,
  url: string,
  outcome: FetchOutcome,
): Promise<void> {
  const filter = { jwksUrl: url, authMethod: "private_key_jwt" as const };
  if ("jwks" in outcome) await credentials.updateMany(filter, { $set: { jwksFetched: outcome } });
  else await credentials.updateMany(filter, { $set: { jwksFetchFailedAt: outcome.failedAt } });
}

/** The active credentials with a JWK Set URL, for the scheduled fetch round (operator-made: a few per partner at most). */
export function jwksUrlCredentials(credentials: Collection<CredentialDoc>): Promise<CredentialDoc[]> {
  return credentials
    .find(
      { authMethod: "private_key_jwt", status: "active", jwksUrl: { $exists: true } },
      { projection: { _id: 1, jwksUrl: 1, jwksFetched: 1, jwksFetchFailedAt: 1 } },
    )
    .toArray();
}
