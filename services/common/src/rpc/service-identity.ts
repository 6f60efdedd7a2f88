import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  X509Certificate,
  type KeyObject,
} from "node:crypto";
import type { DescMethod } from "@bufbuild/protobuf";
import { decodeJwt, type JWTPayload, jwtVerify, SignJWT } from "jose";
import { mayCall, ruleFor, WORKLOADS, type Workload } from "./allowed-callers.js";
import { RpcError, Status } from "./errors.js";
import type { Logger } from "../runtime/logger.js";

// Service identity on every internal call (docs/security.md, "Internal calls", which also gives the
// settings' formats). A caller sends a short JWT it signed (iss = its name, aud = the service), one
// per audience reused until RENEW_BEFORE_SECONDS before it expires; the server verifies it against the
// caller's public key, remembers it until it expires, and checks the caller against allowed-callers.ts.

export const SERVICE_TOKEN_HEADER = "pi-service-token";
const TOKEN_LIFETIME_SECONDS = 60;
const RENEW_BEFORE_SECONDS = 20;
/** Allowed clock difference between the caller's and the server's machines. */
const CLOCK_TOLERANCE_SECONDS = 10;
const TOKEN_TYPE = "pi-service+jwt";
const ALG = "EdDSA";

const isWorkload = (name: unknown): name is Workload => (WORKLOADS as readonly unknown[]).includes(name);

/** Key id: the first 16 characters of the base64url SHA-256 of the public key's SPKI DER. */
export function keyId(publicKey: KeyObject): string {
  return createHash("sha256")
    .update(publicKey.export({ type: "spki", format: "der" }))
    .digest("base64url")
    .slice(0, 16);
}

/** `name:key` as the workload it names and its Ed25519 key, read by `read`; throws with a one-line reason. */
function namedKey(entry: string, what: string, read: (text: string) => KeyObject, formats: string) {
  const at = entry.indexOf(":");
  const name = entry.slice(0, Math.max(at, 0)).trim();
  if (!isWorkload(name))
    throw new Error(`${what} must start with a workload name (${WORKLOADS.join(", ")}) and a colon`);
  let key: KeyObject;
  try {
    key = read(entry.slice(at + 1).trim());
  } catch {
    throw new Error(`the key of ${name} must be ${formats}`);
  }
  if (key.asymmetricKeyType !== "ed25519") throw new Error(`the key of ${name} must be an Ed25519 key`);
  return { name, key };
}

export interface OwnIdentity {
  name: Workload;
  privateKey: KeyObject;
  publicKey: KeyObject;
  kid: string;
}

/** Parses SERVICE_IDENTITY_KEY; throws with a one-line reason. */
export function parseOwnIdentity(value: string): OwnIdentity {
  const { name, key: privateKey } = namedKey(
    value,
    "the key",
    (text) =>
      text.startsWith("-----BEGIN")
        ? createPrivateKey(text)
        : createPrivateKey({ key: Buffer.from(text, "base64"), format: "der", type: "pkcs8" }),
    "base64 of a PKCS#8 DER private key or a PEM PRIVATE KEY block",
  );
  const publicKey = createPublicKey(privateKey);
  return { name, privateKey, publicKey, kid: keyId(publicKey) };
}

function readPublicKey(text: string): KeyObject {
  if (text.includes("-----BEGIN CERTIFICATE")) return new X509Certificate(text).publicKey;
  if (text.startsWith("-----BEGIN")) return createPublicKey(text);
  return createPublicKey({ key: Buffer.from(text, "base64"), format: "der", type: "spki" });
}

/** Every workload's public keys, by name and key id. */
export type PublicKeys = ReadonlyMap<Workload, ReadonlyMap<string, KeyObject>>;

/** Parses SERVICE_IDENTITY_PUBLIC_KEYS (a `name:base64` list, or a JSON object); throws with a one-line reason. */
export function parsePublicKeys(value: string): PublicKeys {
  let entries = value.trim().split(",");
  if (value.trim().startsWith("{")) {
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(value) as Record<string, unknown>;
    } catch {
      throw new Error("must be a JSON object or a comma-separated list of name:base64");
    }
    // Each name to one key or a list of them; namedKey checks both.
    entries = Object.entries(parsed).flatMap(([name, keys]) => [keys].flat().map((key) => `${name}:${key}`));
  }
  const keys = new Map<Workload, Map<string, KeyObject>>();
  for (const entry of entries) {
    const formats = "base64 of an SPKI DER key, a PEM PUBLIC KEY or a PEM CERTIFICATE";
    const { name, key } = namedKey(entry, "every entry", readPublicKey, formats);
    keys.set(name, (keys.get(name) ?? new Map()).set(keyId(key), key));
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

/** Signs the caller's tokens: one per audience, reused until RENEW_BEFORE_SECONDS before it expires. */
export class TokenMinter {
  private readonly held = new Map<Workload, { token: Promise<string>; renewAt: number }>();

  constructor(
    readonly identity: OwnIdentity,
    private readonly now: () => number = Date.now,
  ) {}

  token(audience: Workload): Promise<string> {
    const held = this.held.get(audience);
    if (held && this.now() < held.renewAt) return held.token;
    const iat = Math.floor(this.now() / 1000);
    const token = new SignJWT({})
      .setProtectedHeader({ alg: ALG, typ: TOKEN_TYPE, kid: this.identity.kid })
      .setIssuer(this.identity.name)
      .setAudience(audience)
      .setIssuedAt(iat)
      .setExpirationTime(iat + TOKEN_LIFETIME_SECONDS)
      .sign(this.identity.privateKey);
    this.held.set(audience, { token, renewAt: (iat + TOKEN_LIFETIME_SECONDS - RENEW_BEFORE_SECONDS) * 1000 });
    token.catch(() => this.held.delete(audience));
    return token;
  }
}

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
function claimedCaller(token: string): string | undefined {
  try {
    const iss = decodeJwt(token).iss;
    return typeof iss === "string" && /^[a-z][a-z0-9-]{0,31}$/.test(iss) ? iss : undefined;
  } catch {
    return undefined;
  }
}

/** What a failure of jose's verification means, by its code (and claim). */
function failureOf(err: unknown): IdentityFailure {
  const { code, claim } = err as { code?: unknown; claim?: unknown };
  if (code === "ERR_JWT_EXPIRED") return "expired";
  if (code === "ERR_JWS_INVALID") return "malformed";
  return code === "ERR_JWT_CLAIM_VALIDATION_FAILED" && claim === "aud" ? "wrong_audience" : "invalid";
}

/** Verifies tokens addressed to one service; a verified token is remembered until it expires. */
export class TokenVerifier {
  private readonly verified = new Map<string, { caller: Workload; until: number }>();

  constructor(
    readonly audience: Workload,
    private readonly keys: PublicKeys,
    private readonly now: () => number = Date.now,
    /** How many verified tokens are kept. */
    private readonly kept = 1024,
  ) {}

  /** The verified caller; throws IdentityError. */
  async verify(token: string | null | undefined): Promise<Workload> {
    if (!token) throw new IdentityError("missing");
    const now = this.now();
    const hit = this.verified.get(token);
    if (hit && now < hit.until) return hit.caller;
    this.verified.delete(token);
    const claimed = claimedCaller(token);
    const keyOf = ({ kid }: { kid?: unknown }) => {
      if (claimed === undefined) throw new IdentityError("malformed");
      const named = isWorkload(claimed) ? this.keys.get(claimed) : undefined;
      if (!named) throw new IdentityError("unknown_caller", claimed);
      const key = typeof kid === "string" ? named.get(kid) : undefined;
      if (!key) throw new IdentityError("unknown_key", claimed);
      return key;
    };
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, keyOf, {
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
      throw err instanceof IdentityError ? err : new IdentityError(failureOf(err), claimed);
    }
    const caller = claimed as Workload;
    const until = (Math.min(payload.exp!, payload.iat! + TOKEN_LIFETIME_SECONDS) + CLOCK_TOLERANCE_SECONDS) * 1000;
    // Bounded: the oldest goes first (a live token is verified again at its next call).
    if (this.verified.size >= this.kept) this.verified.delete(this.verified.keys().next().value!);
    this.verified.set(token, { caller, until });
    return caller;
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
  if (service === "grpc.health.v1.Health") return;
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

// One minter per process and key: every client of a process shares its tokens.
const minters = new Map<string, TokenMinter>();

/** The minter of a SERVICE_IDENTITY_KEY value. */
export function minterFor(ownKey: string): TokenMinter {
  if (!minters.has(ownKey)) minters.set(ownKey, new TokenMinter(parseOwnIdentity(ownKey)));
  return minters.get(ownKey)!;
}

/**
 * Checks at a workload's start that it has its own key, named after it, and (a service) everyone's
 * public keys; throws with the one-line reason a bad setting gives.
 */
export function requireIdentity(
  settings: { SERVICE_IDENTITY_KEY?: string; SERVICE_IDENTITY_PUBLIC_KEYS?: string },
  name: string,
): void {
  if (!settings.SERVICE_IDENTITY_KEY)
    throw new Error(`invalid setting SERVICE_IDENTITY_KEY: required (the private key of ${name})`);
  const own = parseOwnIdentity(settings.SERVICE_IDENTITY_KEY).name;
  if (own !== name) throw new Error(`invalid setting SERVICE_IDENTITY_KEY: it is the key of ${own}, not of ${name}`);
  // Every workload that serves (startRpcServer) verifies its callers' tokens.
  if (own !== "gateway" && own !== "ops" && !settings.SERVICE_IDENTITY_PUBLIC_KEYS)
    throw new Error("invalid setting SERVICE_IDENTITY_PUBLIC_KEYS: required (every workload's public key)");
}
