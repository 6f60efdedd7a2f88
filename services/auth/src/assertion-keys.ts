import { compactVerify, createLocalJWKSet, createRemoteJWKSet, customFetch, generateKeyPair, importJWK, SignJWT, type CryptoKey, type FetchImplementation, type JSONWebKeySet, type JWK, type JWTVerifyGetKey } from "jose";
import { LRUCache } from "lru-cache";
import { request } from "undici";
import { egressAgent, readCapped, urlRefusal, type Resolver } from "@pi/common/egress";
import { ASSERTION_ALGORITHMS, isAssertionAlgorithm, type AssertionAlgorithm, type ClaimedAssertion } from "./client-assertion.js";

// The public keys that verify private_key_jwt assertions: a credential's inline JWK Set, or the
// set at its URL, fetched through the egress of the webhooks (@pi/common egress.ts: public
// addresses only, no redirects) and kept per process by jose's remote set: refetched when older
// than 10 minutes, and at once for an unknown kid, at most every 30 s per URL (the partner's key
// rotation: it publishes the new key in its set). The registration is in the database; these
// caches are per process, so replicas may fetch the same set each.

/** A JWK Set's limits: what a partner needs for a rotation, and no more. */
export const MAX_JWKS_KEYS = 10;
export const MAX_JWKS_BYTES = 64 * 1024;
export const JWKS_URL_MAX_AGE_MS = 10 * 60_000;
export const JWKS_URL_REFETCH_COOLDOWN_MS = 30_000;

const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/**
 * Why a JWK Set is not a usable set of public signing keys, or undefined: 1 to 10 RSA (2048 bits
 * or more) or EC (P-256, P-384) public keys, each with a kid of its own, `use` sig if any, an
 * `alg` (if any) of the four accepted, importable.
 */
export async function jwksProblem(value: unknown): Promise<string | undefined> {
  if (typeof value !== "object" || value === null || !Array.isArray((value as { keys?: unknown }).keys)) return "is not a JWK Set (an object with a keys array)";
  const keys = (value as { keys: unknown[] }).keys;
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
    if (jwk.alg !== undefined && !isAssertionAlgorithm(jwk.alg)) return `key ${jwk.kid}: alg must be one of ${ASSERTION_ALGORITHMS.join(", ")}`;
    let alg: AssertionAlgorithm;
    if (jwk.kty === "EC") {
      if (jwk.crv !== "P-256" && jwk.crv !== "P-384") return `key ${jwk.kid}: crv must be P-256 or P-384`;
      alg = jwk.crv === "P-256" ? "ES256" : "ES384";
      if (jwk.alg !== undefined && jwk.alg !== alg) return `key ${jwk.kid}: alg ${jwk.alg} does not fit crv ${jwk.crv}`;
    } else if (jwk.kty === "RSA") {
      if (typeof jwk.n !== "string" || Buffer.from(jwk.n, "base64url").length < 256) return `key ${jwk.kid}: RSA keys must be 2048 bits or more`;
      alg = jwk.alg === "RS256" ? "RS256" : "RS384";
      if (jwk.alg !== undefined && !jwk.alg.startsWith("RS")) return `key ${jwk.kid}: alg ${jwk.alg} does not fit an RSA key`;
    } else {
      return `key ${jwk.kid}: kty must be RSA or EC`;
    }
    try {
      await importJWK(jwk, alg);
    } catch (err) {
      return `key ${jwk.kid} cannot be read: ${(err as Error).message}`;
    }
  }
  return undefined;
}

/** Where a credential's keys are: one of the two. */
export interface KeySource {
  _id: string;
  jwks?: JSONWebKeySet;
  jwksUrl?: string;
}

export interface AssertionKeysOptions {
  /** WEBHOOK_ALLOW_INSECURE_URLS: http and internal addresses too (the local stack). */
  allowInsecure: boolean;
  timeoutMs?: number;
  resolve?: Resolver;
  /** The least time between two fetches of one URL's set (default JWKS_URL_REFETCH_COOLDOWN_MS; a test shortens it). */
  refetchCooldownMs?: number;
}

export class AssertionKeys {
  private readonly inline = new LRUCache<string, JWTVerifyGetKey>({ max: 10_000 });
  private readonly remote = new LRUCache<string, JWTVerifyGetKey>({ max: 1_000 });
  private readonly fetchJwks: FetchImplementation;
  /** Per algorithm, a public key that verifies nothing anyone sent: what an assertion is checked against when its key is not found. */
  private dummies = new Map<AssertionAlgorithm, CryptoKey>();
  /** A well-formed assertion no dummy key verifies: checked instead of a malformed one. */
  private dummyAssertion = "";

  constructor(private readonly opts: AssertionKeysOptions) {
    const agent = egressAgent({ allowInsecure: opts.allowInsecure, timeoutMs: opts.timeoutMs ?? 5_000, ...(opts.resolve ? { resolve: opts.resolve } : {}) });
    this.fetchJwks = async (url, init) => {
      const refusal = urlRefusal(url, opts.allowInsecure, "JWK Set URL");
      if (refusal) throw new Error(refusal);
      const res = await request(url, { method: "GET", headers: Object.fromEntries(init.headers), dispatcher: agent, signal: init.signal });
      const text = await readCapped(res.body, MAX_JWKS_BYTES + 1);
      if (Buffer.byteLength(text) > MAX_JWKS_BYTES) throw new Error(`the JWK Set at the URL is larger than ${MAX_JWKS_BYTES} bytes`);
      return new Response(text, { status: res.statusCode < 200 ? 502 : res.statusCode, headers: { "content-type": "application/json" } });
    };
  }

  async start(): Promise<void> {
    for (const alg of ASSERTION_ALGORITHMS) this.dummies.set(alg, (await generateKeyPair(alg)).publicKey);
    const stranger = await generateKeyPair("ES256");
    this.dummyAssertion = await new SignJWT({}).setProtectedHeader({ alg: "ES256", kid: "dummy" }).sign(stranger.privateKey);
  }

  /** Fetches the set at a URL once, for a registration: why it cannot serve, or undefined. */
  async urlProblem(url: string): Promise<string | undefined> {
    const refusal = urlRefusal(url, this.opts.allowInsecure, "JWK Set URL");
    if (refusal) return refusal;
    try {
      const res = await this.fetchJwks(url, { headers: new Headers({ accept: "application/json" }), method: "GET", redirect: "manual", signal: AbortSignal.timeout(this.opts.timeoutMs ?? 5_000) });
      if (res.status !== 200) return `the JWK Set URL answered ${res.status}`;
      const problem = await jwksProblem(await res.json());
      return problem ? `the JWK Set at the URL ${problem}` : undefined;
    } catch (err) {
      return `the JWK Set URL could not be fetched: ${(err as Error).message}`;
    }
  }

  /**
   * The payload of an assertion whose signature one of the credential's keys verifies, or
   * undefined. Every assertion costs one signature check by its own algorithm: one whose key is
   * not found (unknown client or kid, a credential without keys) is checked against the dummy key
   * of that algorithm, a malformed one (`claimed` undefined) the dummy assertion.
   */
  async verify(assertion: string, claimed: ClaimedAssertion | undefined, credential: KeySource | undefined): Promise<Record<string, unknown> | undefined> {
    const alg = claimed?.alg ?? "ES256";
    const key = claimed && credential ? await this.keyOf(credential, claimed) : undefined;
    try {
      const { payload } = await compactVerify(claimed ? assertion : this.dummyAssertion, key ?? this.dummies.get(alg)!, { algorithms: [alg] });
      if (!key) return undefined;
      const claims = JSON.parse(new TextDecoder().decode(payload)) as unknown;
      return typeof claims === "object" && claims !== null && !Array.isArray(claims) ? (claims as Record<string, unknown>) : undefined;
    } catch {
      return undefined;
    }
  }

  private async keyOf(credential: KeySource, claimed: ClaimedAssertion): Promise<CryptoKey | undefined> {
    const resolver = this.resolverOf(credential);
    if (!resolver) return undefined;
    try {
      return (await resolver({ alg: claimed.alg, kid: claimed.kid }, { payload: "", signature: "" })) as CryptoKey;
    } catch {
      // No such kid (after a refetch, when one was due), a fetch that failed, two keys of one kid.
      return undefined;
    }
  }

  private resolverOf(credential: KeySource): JWTVerifyGetKey | undefined {
    if (credential.jwks) {
      let resolver = this.inline.get(credential._id);
      if (!resolver) this.inline.set(credential._id, (resolver = createLocalJWKSet(credential.jwks)));
      return resolver;
    }
    if (credential.jwksUrl) {
      let resolver = this.remote.get(credential.jwksUrl);
      if (!resolver) {
        resolver = createRemoteJWKSet(new URL(credential.jwksUrl), {
          cacheMaxAge: JWKS_URL_MAX_AGE_MS,
          cooldownDuration: this.opts.refetchCooldownMs ?? JWKS_URL_REFETCH_COOLDOWN_MS,
          timeoutDuration: this.opts.timeoutMs ?? 5_000,
          [customFetch]: this.fetchJwks,
        });
        this.remote.set(credential.jwksUrl, resolver);
      }
      return resolver;
    }
    return undefined;
  }
}
