import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  X509Certificate,
  type KeyObject,
} from "node:crypto";
import type { DescMethod } from "@bufbuild/protobuf";
import { decodeJwt, decodeProtectedHeader, type JWTPayload, jwtVerify, SignJWT } from "jose";
import { mayCall, ruleFor, SERVICE_OF, WORKLOADS, type Workload } from "./allowed-callers.js";
import { RpcError, Status } from "./errors.js";
import type { Logger } from "../runtime/logger.js";

// Service identity on every internal call (docs/security.md, "Internal calls", which also gives the
// settings' formats). A caller sends a short JWT it signed (iss = its name, aud = the service), one
// per audience reused until RENEW_BEFORE_SECONDS before it expires; the server verifies it against the
// caller's public key, remembers it until it expires, and checks the caller against allowed-callers.ts.

export const SERVICE_TOKEN_HEADER = "pi-service-token";
export const TOKEN_LIFETIME_SECONDS = 60;
/** A caller signs a new token once the one it holds has less than this left. */
export const RENEW_BEFORE_SECONDS = 20;
/** Allowed clock difference between the caller's and the server's machines. */
export const CLOCK_TOLERANCE_SECONDS = 10;
const TOKEN_TYPE = "pi-service+jwt";
const ALG = "EdDSA";
const HEALTH_SERVICE = "grpc.health.v1.Health";

const isWorkload = (name: string): name is Workload => (WORKLOADS as readonly string[]).includes(name);

/** Key id: the first 16 characters of the base64url SHA-256 of the public key's SPKI DER. */
export function keyId(publicKey: KeyObject): string {
  return createHash("sha256")
    .update(publicKey.export({ type: "spki", format: "der" }))
    .digest("base64url")
    .slice(0, 16);
}

function requireEd25519(key: KeyObject, what: string): KeyObject {
  if (key.asymmetricKeyType !== "ed25519") throw new Error(`${what} must be an Ed25519 key`);
  return key;
}

function splitName(entry: string, what: string): [Workload, string] {
  const at = entry.indexOf(":");
  const name = at > 0 ? entry.slice(0, at).trim() : "";
  if (!isWorkload(name))
    throw new Error(`${what} must start with a workload name (${WORKLOADS.join(", ")}) and a colon`);
  return [name, entry.slice(at + 1).trim()];
}

export interface OwnIdentity {
  name: Workload;
  privateKey: KeyObject;
  publicKey: KeyObject;
  kid: string;
}

/** Parses SERVICE_IDENTITY_KEY; throws with a one-line reason. */
export function parseOwnIdentity(value: string): OwnIdentity {
  const [name, key] = splitName(value, "the key");
  let privateKey: KeyObject;
  try {
    privateKey = key.startsWith("-----BEGIN")
      ? createPrivateKey(key)
      : createPrivateKey({ key: Buffer.from(key, "base64"), format: "der", type: "pkcs8" });
  } catch {
    throw new Error("the key must be base64 of a PKCS#8 DER private key or a PEM PRIVATE KEY block");
  }
  requireEd25519(privateKey, "the key");
  const publicKey = createPublicKey(privateKey);
  return { name, privateKey, publicKey, kid: keyId(publicKey) };
}

function parsePublicKey(text: string): KeyObject {
  try {
    if (text.includes("-----BEGIN CERTIFICATE")) return new X509Certificate(text).publicKey;
    if (text.startsWith("-----BEGIN")) return createPublicKey(text);
    return createPublicKey({ key: Buffer.from(text, "base64"), format: "der", type: "spki" });
  } catch {
    throw new Error("a public key must be base64 of an SPKI DER key, a PEM PUBLIC KEY or a PEM CERTIFICATE");
  }
}

/** Every workload's public keys, by name and key id. */
export type PublicKeys = ReadonlyMap<Workload, ReadonlyMap<string, KeyObject>>;

/** Parses SERVICE_IDENTITY_PUBLIC_KEYS; throws with a one-line reason. */
export function parsePublicKeys(value: string): PublicKeys {
  const entries: [Workload, string][] = [];
  const text = value.trim();
  if (text.startsWith("{")) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new Error("must be a JSON object or a comma-separated list of name:base64");
    }
    for (const [name, keys] of Object.entries(parsed as Record<string, unknown>)) {
      if (!isWorkload(name)) throw new Error(`${JSON.stringify(name)} is not a workload (${WORKLOADS.join(", ")})`);
      for (const key of Array.isArray(keys) ? keys : [keys]) {
        if (typeof key !== "string") throw new Error(`the key of ${name} must be a string`);
        entries.push([name, key]);
      }
    }
  } else {
    for (const entry of text.split(",")) entries.push(splitName(entry.trim(), "every entry"));
  }
  const keys = new Map<Workload, Map<string, KeyObject>>();
  for (const [name, text] of entries) {
    const key = requireEd25519(parsePublicKey(text), `the public key of ${name}`);
    if (!keys.has(name)) keys.set(name, new Map());
    keys.get(name)!.set(keyId(key), key);
  }
  if (keys.size === 0) throw new Error("names no key");
  return keys;
}

/** A fresh key pair: SERVICE_IDENTITY_KEY's value and the `name:base64` public key entry. */
export function generateIdentity(name: Workload): { key: string; publicKey: string } {
  const { privateKey } = generateKeyPairSync("ed25519");
  const key = `${name}:${privateKey.export({ type: "pkcs8", format: "der" }).toString("base64")}`;
  return { key, publicKey: publicKeyEntry(key) };
}

/** The `name:base64` entry of SERVICE_IDENTITY_PUBLIC_KEYS for a SERVICE_IDENTITY_KEY value. */
export function publicKeyEntry(ownKey: string): string {
  const own = parseOwnIdentity(ownKey);
  return `${own.name}:${own.publicKey.export({ type: "spki", format: "der" }).toString("base64")}`;
}

// --- minting (the caller's side) ---

/** Signs the caller's tokens: one per audience, reused until RENEW_BEFORE_SECONDS before it expires. */
export class TokenMinter {
  private readonly held = new Map<Workload, { token: Promise<string>; renewAt: number }>();

  constructor(
    readonly identity: OwnIdentity,
    private readonly now: () => number = Date.now,
  ) {}

  token(audience: Workload): Promise<string> {
    const now = this.now();
    const held = this.held.get(audience);
    if (held && now < held.renewAt) return held.token;
    const iat = Math.floor(now / 1000);
    const exp = iat + TOKEN_LIFETIME_SECONDS;
    const token = new SignJWT({})
      .setProtectedHeader({ alg: ALG, typ: TOKEN_TYPE, kid: this.identity.kid })
      .setIssuer(this.identity.name)
      .setAudience(audience)
      .setIssuedAt(iat)
      .setExpirationTime(exp)
      .sign(this.identity.privateKey);
    this.held.set(audience, { token, renewAt: (exp - RENEW_BEFORE_SECONDS) * 1000 });
    token.catch(() => this.held.delete(audience));
    return token;
  }
}

// --- verification (the server's side) ---

export type IdentityFailure =
  | "missing"
  | "malformed"
  | "unknown_caller"
  | "unknown_key"
  | "expired"
  | "wrong_audience"
  | "invalid";

/** A token that proves no identity; `claimed` is the issuer it names, if any (for the log). */
export class IdentityError extends Error {
  constructor(
    readonly failure: IdentityFailure,
    readonly claimed?: string,
  ) {
    super(`no valid service identity (${failure.replace(/_/g, " ")})`);
  }
}

/** The issuer a token claims, unverified, only if it looks like a name (it goes to a log line). */
export function claimedCaller(token: string | null | undefined): string | undefined {
  if (!token) return undefined;
  try {
    const iss = decodeJwt(token).iss;
    return typeof iss === "string" && /^[a-z][a-z0-9-]{0,31}$/.test(iss) ? iss : undefined;
  } catch {
    return undefined;
  }
}

export interface TokenVerifierOptions {
  now?: () => number;
  /** How many verified tokens are remembered (each until it expires). */
  cacheSize?: number;
}

/** Verifies tokens addressed to one service; a verified token is remembered until it expires. */
export class TokenVerifier {
  private readonly verified = new Map<string, { caller: Workload; until: number }>();
  private readonly now: () => number;
  private readonly cacheSize: number;

  constructor(
    readonly audience: Workload,
    private readonly keys: PublicKeys,
    options: TokenVerifierOptions = {},
  ) {
    this.now = options.now ?? Date.now;
    this.cacheSize = options.cacheSize ?? 1024;
  }

  /** The verified caller; throws IdentityError. */
  async verify(token: string | null | undefined): Promise<Workload> {
    if (!token) throw new IdentityError("missing");
    const now = this.now();
    const hit = this.verified.get(token);
    if (hit) {
      if (now < hit.until) return hit.caller;
      this.verified.delete(token);
    }
    const claimed = claimedCaller(token);
    let kid: unknown;
    try {
      kid = decodeProtectedHeader(token).kid;
    } catch {
      throw new IdentityError("malformed", claimed);
    }
    if (claimed === undefined) throw new IdentityError("malformed");
    if (!isWorkload(claimed) || !this.keys.has(claimed)) throw new IdentityError("unknown_caller", claimed);
    const key = typeof kid === "string" ? this.keys.get(claimed)!.get(kid) : undefined;
    if (!key) throw new IdentityError("unknown_key", claimed);
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, key, {
        algorithms: [ALG],
        typ: TOKEN_TYPE,
        issuer: claimed,
        audience: this.audience,
        requiredClaims: ["iat", "exp"],
        // Bounds a token however far its exp was set: at most the lifetime callers use.
        maxTokenAge: TOKEN_LIFETIME_SECONDS,
        clockTolerance: CLOCK_TOLERANCE_SECONDS,
        currentDate: new Date(now),
      }));
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      const claim = (err as { claim?: unknown }).claim;
      if (code === "ERR_JWT_EXPIRED") throw new IdentityError("expired", claimed);
      if (code === "ERR_JWT_CLAIM_VALIDATION_FAILED" && claim === "aud")
        throw new IdentityError("wrong_audience", claimed);
      throw new IdentityError("invalid", claimed);
    }
    const until = (Math.min(payload.exp!, payload.iat! + TOKEN_LIFETIME_SECONDS) + CLOCK_TOLERANCE_SECONDS) * 1000;
    this.remember(token, claimed, until);
    return claimed;
  }

  private remember(token: string, caller: Workload, until: number): void {
    if (this.verified.size >= this.cacheSize) {
      const now = this.now();
      for (const [t, v] of this.verified) if (v.until <= now) this.verified.delete(t);
      // Still full: forget the oldest.
      while (this.verified.size >= this.cacheSize) this.verified.delete(this.verified.keys().next().value!);
    }
    this.verified.set(token, { caller, until });
  }
}

/**
 * The server's check of a call to `method`: without a valid token for this service it is refused
 * UNAUTHENTICATED, when the allow-list does not name its caller PERMISSION_DENIED; either refusal is
 * logged with the caller the token claims (never the token). Health checks pass untouched.
 */
export async function checkCaller(
  verifier: TokenVerifier,
  logger: Logger,
  method: DescMethod,
  token: string | undefined,
): Promise<void> {
  const service = method.parent.typeName;
  if (service === HEALTH_SERVICE) return;
  const name = `${service}/${method.name}`;
  let caller: Workload;
  try {
    caller = await verifier.verify(token);
  } catch (err) {
    if (!(err instanceof IdentityError)) throw err;
    logger.warn(
      { method: name, caller: err.claimed ?? null, reason: err.failure },
      "internal call refused: no valid service identity",
    );
    throw new RpcError(err.message, Status.UNAUTHENTICATED);
  }
  if (!mayCall(caller, service, method.name)) {
    const reason = ruleFor(service, method.name) ? "not_allowed" : "method_not_listed";
    logger.warn({ method: name, caller, reason }, "internal call refused: caller not allowed");
    throw new RpcError(`${caller} may not call ${name}`, Status.PERMISSION_DENIED);
  }
}

// Parsed once per setting value: every client and server of a process shares them.
const ownCache = new Map<string, TokenMinter>();
const publicCache = new Map<string, PublicKeys>();

/** The minter of a SERVICE_IDENTITY_KEY value (one per process and value). */
export function minterFor(ownKey: string): TokenMinter {
  if (!ownCache.has(ownKey)) ownCache.set(ownKey, new TokenMinter(parseOwnIdentity(ownKey)));
  return ownCache.get(ownKey)!;
}

export function publicKeysFor(value: string): PublicKeys {
  if (!publicCache.has(value)) publicCache.set(value, parsePublicKeys(value));
  return publicCache.get(value)!;
}

/**
 * Checks at a workload's start that it has its own key, named after it, and (a service) everyone's
 * public keys; throws with the one-line reason a bad setting gives.
 */
export function requireIdentity(
  settings: { SERVICE_IDENTITY_KEY?: string; SERVICE_IDENTITY_PUBLIC_KEYS?: string },
  name: string,
): void {
  const serves = Object.values(SERVICE_OF).includes(name as Workload);
  if (!settings.SERVICE_IDENTITY_KEY)
    throw new Error(`invalid setting SERVICE_IDENTITY_KEY: required (the private key of ${name})`);
  const own = parseOwnIdentity(settings.SERVICE_IDENTITY_KEY).name;
  if (own !== name) throw new Error(`invalid setting SERVICE_IDENTITY_KEY: it is the key of ${own}, not of ${name}`);
  if (serves && !settings.SERVICE_IDENTITY_PUBLIC_KEYS)
    throw new Error("invalid setting SERVICE_IDENTITY_PUBLIC_KEYS: required (every workload's public key)");
}

/** The audience of calls to a service (its workload), or undefined for open ones (health). */
export function audienceOf(serviceTypeName: string): Workload | undefined {
  return SERVICE_OF[serviceTypeName];
}
