import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { KEY_ID, parseDataKeys } from "./data-keys.js";
import { parseServiceUrls } from "./service-endpoints.js";
import { parseOwnIdentity, parsePublicKeys } from "./service-identity.js";

// Every setting of the operator contract, plus the internal addresses, in one schema. Each service
// validates the whole set at start so that a bad value anywhere is caught by whoever reads it.
const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
const bool = z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1");
// Checked by its own parser (service-endpoints.ts, data-keys.ts, service-identity.ts, parsePeppers
// below); kept as the text given, parsed once where used. A message names what is wrong, never a key.
const checkedBy = (parse: (value: string) => unknown) =>
  z.string().superRefine((value, ctx) => {
    try {
      parse(value);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message });
    }
  });
// A `*_SERVICE_URL`: one base URL or a comma-separated list (every replica).
const serviceUrls = checkedBy(parseServiceUrls);
const mongoUri = z.string().regex(/^mongodb(\+srv)?:\/\//, "must be a mongodb:// URI");

/** CREDENTIAL_PEPPERS: `id:pepper[,id:pepper...]`, newest first; a pepper has at least 32 characters and no ",". */
export function parsePeppers(text: string): { id: string; pepper: string }[] {
  const out: { id: string; pepper: string }[] = [];
  for (const [i, entry] of text.split(",").entries()) {
    const colon = entry.indexOf(":");
    const id = colon < 0 ? "" : entry.slice(0, colon);
    const pepper = colon < 0 ? "" : entry.slice(colon + 1);
    if (!KEY_ID.test(id))
      throw new Error(`entry ${i + 1}: the pepper id must be 1 to 32 letters, digits, _ or -, followed by ":"`);
    if (pepper.length < 32) throw new Error(`pepper ${id}: must be at least 32 characters`);
    if (out.some((p) => p.id === id)) throw new Error(`pepper ${id}: the id is given twice`);
    out.push({ id, pepper });
  }
  return out;
}

// --- API deprecations (docs/edge.md, "Versioning") ---
// API_DEPRECATIONS is a JSON array of rules; each marks a whole version ("/v1") or one operation
// ("GET /v1/connections/{id}") deprecated, and the gateway adds Deprecation and Sunset to its answers.
export const SUNSET_NOTICE_DAYS = 180;
const instant = z.iso.datetime({ offset: true }).transform((s) => new Date(s));
export const deprecationRuleSchema = z
  .object({
    route: z
      .string()
      .regex(
        /^(\/v[0-9]+|(GET|POST|PUT|PATCH|DELETE) \/v[0-9]+(\/([A-Za-z0-9_.-]+|\{[A-Za-z0-9_]+\}))+)$/,
        'must be "/vN" or "METHOD /vN/path/{param}"',
      ),
    deprecation: instant,
    sunset: instant.optional(),
    link: z.url({ protocol: /^https?$/ }).optional(),
  })
  .strict()
  // The notice period (the spec leaves it to us): a sunset comes at least 180 days after the
  // deprecation is announced, so a configuration cannot give partners less.
  .refine((r) => !r.sunset || r.sunset.getTime() - r.deprecation.getTime() >= SUNSET_NOTICE_DAYS * 86_400_000, {
    message: `sunset must be at least ${SUNSET_NOTICE_DAYS} days after deprecation`,
    path: ["sunset"],
  });
export type DeprecationRule = z.infer<typeof deprecationRuleSchema>;
const deprecations = z
  .string()
  .transform((text, ctx) => {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      ctx.addIssue({ code: "custom", message: "must be a JSON array" });
      return z.NEVER;
    }
  })
  .pipe(z.array(deprecationRuleSchema));

export const settingsSchema = z.object({
  LOG_LEVEL: z.enum(["trace", "debug", "info", "warn", "error", "fatal", "silent"]).default("info"),

  GATEWAY_PORT: port.default(8080),
  GATEWAY_HOST: z.string().min(1).default("127.0.0.1"),
  AUTH_SERVICE_PORT: port.default(50051),
  CONNECTION_SERVICE_PORT: port.default(50052),
  FILE_INTAKE_SERVICE_PORT: port.default(50053),
  WEBHOOK_SERVICE_PORT: port.default(50054),
  // The extraction service serves only its health checks (nobody calls it).
  EXTRACTION_SERVICE_PORT: port.default(50055),
  SERVICE_HOST: z.string().min(1).default("127.0.0.1"),
  AUTH_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50051"),
  CONNECTION_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50052"),
  FILE_INTAKE_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50053"),
  WEBHOOK_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50054"),
  // The admin plane's own port and addresses, of the services that have admin RPCs
  // (allowed-callers.ts): only the operator CLI (and the webhook service, for GetWebhookTarget) calls them.
  AUTH_ADMIN_PORT: port.default(50061),
  CONNECTION_ADMIN_PORT: port.default(50062),
  WEBHOOK_ADMIN_PORT: port.default(50064),
  AUTH_ADMIN_URL: serviceUrls.default("http://127.0.0.1:50061"),
  CONNECTION_ADMIN_URL: serviceUrls.default("http://127.0.0.1:50062"),
  WEBHOOK_ADMIN_URL: serviceUrls.default("http://127.0.0.1:50064"),

  // Prometheus metrics (`GET /metrics`, metrics.ts) on a port of their own, on SERVICE_HOST: every
  // process, the gateway too (never its partner port). 0 takes a free one. METRICS_ENABLED=false
  // serves and records none (to measure what they cost).
  METRICS_PORT: port.default(9464),
  METRICS_ENABLED: bool.default(true),

  MONGODB_URI: mongoUri.default("mongodb://127.0.0.1:27017/"),
  KAFKA_BROKERS: z
    .string()
    .regex(/^[^,\s]+:\d+(,[^,\s]+:\d+)*$/, "must be host:port[,host:port...]")
    .default("127.0.0.1:9092"),
  // Prefix of database names, Kafka topics and consumer groups, so that several stacks (or test
  // runs) can share one MongoDB and one Kafka without seeing each other's data.
  DATA_NAMESPACE: z
    .string()
    .regex(/^[a-z][a-z0-9_]{0,30}$/, "must be lowercase letters, digits, _")
    .default("pi"),

  // Each file is decoded in a child process of the extraction service, killed past these
  // (docs/files.md, "Extraction"): its resident memory, below the container's memory limit, and
  // its wall time per file, and the CPU time it spends on one file (user and system; a file that
  // keeps a core busy is stopped sooner than one that waits).
  EXTRACTION_MEMORY_CEILING_MB: z.coerce.number().int().min(64).max(16384).default(512),
  EXTRACTION_TIME_LIMIT_SECONDS: z.coerce.number().int().min(1).max(3600).default(60),
  EXTRACTION_CPU_TIME_LIMIT_SECONDS: z.coerce.number().int().min(1).max(3600).default(30),

  ADDRESS_DOMAIN: z
    .string()
    .regex(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/, "must be a lowercase DNS name")
    .default("elders.example"),
  ACCESS_TOKEN_TTL_SECONDS: positiveInt.default(900),
  // The token endpoint's public address (behind the ingress), ending in /oauth/token: the audience
  // of private_key_jwt client assertions and, without /oauth/token, the issuer of the discovery
  // metadata. Unset: http://127.0.0.1:GATEWAY_PORT/oauth/token, the local stack's.
  TOKEN_ENDPOINT_URL: z
    .url({ protocol: /^https?$/ })
    .refine(
      (u) => new URL(u).pathname.endsWith("/oauth/token") && !u.includes("?") && !u.includes("#"),
      "must be an http(s) URL ending in /oauth/token",
    )
    .optional(),
  // How often auth replicas reload the signing keys and gateways refresh the JWKS; a rotated-in
  // key starts signing after twice this (docs/authentication.md, "Key rotation").
  JWKS_REFRESH_SECONDS: positiveInt.default(30),
  RATE_LIMIT_V1_PER_SECOND: z.coerce.number().int().min(50).default(100),
  RATE_LIMIT_TOKEN_PER_MINUTE: z.coerce.number().int().min(60).default(120),
  // How many proxies in front of the gateway append to X-Forwarded-For (the ingress: 1). 0 means
  // the header is ignored and the client IP of the token endpoint's limit is the socket's address.
  TRUSTED_PROXY_HOPS: z.coerce.number().int().min(0).max(10).default(0),
  API_DEPRECATIONS: deprecations.default([]),
  // "25 MB" is read as 25 MiB, the more generous reading, so no "25 MB" file is refused.
  MAX_FILE_BYTES: positiveInt.default(25 * 1024 * 1024),
  // Bounds on uploads in flight at one gateway instance (docs/files.md, "Bounds on uploads").
  UPLOAD_CONCURRENCY_PER_PARTNER: positiveInt.default(8),
  UPLOAD_CONCURRENCY_TOTAL: positiveInt.default(64),
  UPLOAD_MIN_BYTES_PER_SECOND: z.coerce
    .number()
    .int()
    .min(0)
    .default(16 * 1024),
  UPLOAD_RATE_WINDOW_SECONDS: z.coerce.number().positive().max(300).default(10),
  IDEMPOTENCY_TTL_SECONDS: positiveInt.default(86400),
  CONNECTION_PENDING_TTL_SECONDS: positiveInt.default(2592000),
  // Most connections one partner may hold pending (a caregiver's decline included: it reads as
  // pending) at once, per mode; past it POST /v1/connections is 429 (docs/connections.md, "Bounds").
  PENDING_CONNECTIONS_PER_PARTNER: positiveInt.default(1000),
  TEST_PENDING_CONNECTIONS_PER_PARTNER: positiveInt.default(100),
  // Most connections one partner may open (new addresses, resolvable or not, and reopenings) per UTC
  // day, per mode: the pending bound frees a slot at each DELETE, so this bounds the ended
  // connections and audit records a POST-DELETE loop leaves (docs/connections.md, "Bounds").
  CONNECTIONS_OPENED_PER_PARTNER_PER_DAY: positiveInt.default(1000),
  TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY: positiveInt.default(100),
  // A (partner, address) connection that was revoked or expired reopens at most once per this
  // period (a live caregiver who declined is asked again at most once a month); a test
  // connection's, with no caregiver to ask, once a minute. 429 with Retry-After past it.
  CONNECTION_REOPEN_INTERVAL_SECONDS: positiveInt.default(2592000),
  TEST_CONNECTION_REOPEN_INTERVAL_SECONDS: positiveInt.default(60),
  // How long a revoked or expired connection is kept after its last change, both modes (2 years):
  // then the connection service's sweep deletes it, once its event and audit record were relayed
  // (docs/connections.md, "Retention"). With the daily bound, one partner holds at most this many
  // days' openings of ended connections. The sweep never uses less than the reopen intervals.
  ENDED_CONNECTION_RETENTION_SECONDS: positiveInt.default(2 * 365 * 86400),
  SANDBOX_APPROVAL_DELAY_SECONDS: z.coerce.number().int().min(0).default(30),
  WEBHOOK_RETRY_BASE_SECONDS: z.coerce.number().positive().default(30),
  WEBHOOK_RETRY_WINDOW_SECONDS: positiveInt.default(86400),
  WEBHOOK_ALLOW_INSECURE_URLS: bool.default(false),
  // How long one webhook attempt may take (connect, answer); only a 2xx within it counts.
  WEBHOOK_ATTEMPT_TIMEOUT_SECONDS: z.coerce.number().positive().max(60).default(10),
  // How long webhook events are kept after they were stored (GET /v1/events lists them): at least
  // the 30 days partners are promised. Of a partner's test events, only the newest this many are
  // kept (a sandbox connection is approved automatically: test events cost a partner nothing).
  WEBHOOK_EVENT_RETENTION_SECONDS: z.coerce
    .number()
    .int()
    .min(30 * 86400)
    .default(30 * 86400),
  WEBHOOK_TEST_EVENTS_PER_PARTNER: positiveInt.default(10_000),

  // This workload's Kafka user (SASL/SCRAM; docs/security.md "Kafka"): both or neither. The broker's
  // ACLs admit each user only to its own topics and groups (kafka-access.ts). `npm start` and the
  // chart give every workload its own.
  KAFKA_USERNAME: z.string().min(1).optional(),
  KAFKA_PASSWORD: z.string().min(1).optional(),
  KAFKA_SASL_MECHANISM: z.enum(["scram-sha-256", "scram-sha-512"]).default("scram-sha-256"),
  KAFKA_SSL: bool.default(false),

  // Keyed hash of client secrets. Required by the auth service; the local stack generates one.
  // Its id is "p1" (stored with every hash it made); CREDENTIAL_PEPPERS brings newer ones.
  CREDENTIAL_PEPPER: z.string().min(32, "must be at least 32 characters").optional(),
  // More peppers, `id:pepper,...` newest first: the first hashes new secrets, every one (and
  // CREDENTIAL_PEPPER as "p1") still verifies the hashes it made (docs/security.md).
  CREDENTIAL_PEPPERS: checkedBy(parsePeppers).optional(),
  // Key-encryption keys of the envelope encryption of health data and sealed secrets: `kid:base64key,...`
  // (32 random bytes each), newest first. Required by auth and file-intake; the local stack generates one.
  DATA_KEYS: checkedBy(parseDataKeys).optional(),
  // How long a file's bytes, its extraction result and its metadata (elder, purpose, SHA-256) are
  // kept after the file was accepted; test files' for the shorter TEST_FILE_RETENTION_SECONDS. The
  // file's id and status stay (docs/security.md, "Data at rest").
  FILE_RETENTION_SECONDS: positiveInt.default(30 * 86400),
  TEST_FILE_RETENTION_SECONDS: positiveInt.default(86400),
  // What a partner's files may hold in one mode, accepted (until retention deletes their bytes) and
  // in flight together; a test credential's far less, so it alone cannot fill the volume
  // (docs/files.md, "Storage quota").
  FILE_STORAGE_QUOTA_BYTES: positiveInt.default(10 * 1024 ** 3),
  TEST_FILE_STORAGE_QUOTA_BYTES: positiveInt.default(256 * 1024 ** 2),
  // What all partners' files may hold together (accepted and in flight, both modes), well below the
  // volume of file-intake's database: past it every upload is a fast 503 with Retry-After, never a
  // full disk (docs/files.md, "Store-wide high-water mark"). The chart refuses a value that does not
  // fit its volume, and quotas that do not fit under it.
  FILE_STORE_HIGH_WATER_BYTES: positiveInt.default(16 * 1024 ** 3),
  // How long the audit trail keeps a record (6 years, HIPAA's retention of compliance records): the
  // auth service's sweep deletes older ones (docs/security.md, "Audit trail").
  AUDIT_RETENTION_SECONDS: positiveInt.default(6 * 365 * 86400),
  // The auth service's audit retention sweep connects as a database user of its own (role
  // auditRetention: find and remove on the audit database), so that the service's own user can only
  // append. Unset: the service's own MONGODB_URI (npm start and the stand-in have no users).
  AUDIT_RETENTION_MONGODB_URI: mongoUri.optional(),

  // Service identity on internal calls (services/common/src/service-identity.ts, docs/security.md
  // "Internal calls"). This workload's own private key, `<name>:<key>`: required by every service
  // and the operator CLI (which reads the local stack's from STATE_DIR when unset).
  SERVICE_IDENTITY_KEY: checkedBy(parseOwnIdentity).optional(),
  // Every workload's public key: `name:base64,...` or a JSON object. Required by every service.
  SERVICE_IDENTITY_PUBLIC_KEYS: checkedBy(parsePublicKeys).optional(),
});

export type Settings = z.infer<typeof settingsSchema>;

/** The token endpoint's public URL (TOKEN_ENDPOINT_URL, or the local stack's). */
export function tokenEndpointUrl(settings: Pick<Settings, "TOKEN_ENDPOINT_URL" | "GATEWAY_PORT">): string {
  return settings.TOKEN_ENDPOINT_URL ?? `http://127.0.0.1:${settings.GATEWAY_PORT}/oauth/token`;
}

/** The authorization server's issuer identifier (RFC 8414): the token endpoint's URL without /oauth/token. */
export function authorizationServerIssuer(settings: Pick<Settings, "TOKEN_ENDPOINT_URL" | "GATEWAY_PORT">): string {
  return tokenEndpointUrl(settings).replace(/\/oauth\/token$/, "");
}

export class SettingsError extends Error {}

/** Parses the environment; the error message is one line naming the first bad setting. */
export function parseSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ""));
  const result = settingsSchema.safeParse(present);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new SettingsError(`invalid setting ${issue.path.join(".")}: ${issue.message}`);
  }
  return result.data;
}

/** For a service's start: a bad setting ends the process with one line on stderr. */
export function loadSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  try {
    return parseSettings(env);
  } catch (err) {
    if (err instanceof SettingsError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

// --- the local stack's addresses ---
// `npm start` takes free ports for what the user did not set and records the internal addresses it
// chose in this file under its STATE_DIR; the operator CLI reads them from there unless they are set.
export const LOCAL_STACK_FILE = "stack.json";
export const SERVICE_URL_SETTINGS = [
  "AUTH_SERVICE_URL",
  "CONNECTION_SERVICE_URL",
  "FILE_INTAKE_SERVICE_URL",
  "WEBHOOK_SERVICE_URL",
  "AUTH_ADMIN_URL",
  "CONNECTION_ADMIN_URL",
  "WEBHOOK_ADMIN_URL",
] as const;

/** A local stack's JSON file under its STATE_DIR; {} when there is none (or it is unreadable). */
function readStateFile(stateDir: string, name: string): Record<string, unknown> {
  const file = join(stateDir, name);
  try {
    return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** The environment with every unset `*_SERVICE_URL` taken from a running local stack's file, if any. */
export function withLocalStackAddresses(env: NodeJS.ProcessEnv, stateDir: string): NodeJS.ProcessEnv {
  if (SERVICE_URL_SETTINGS.every((name) => env[name])) return env;
  const recorded = readStateFile(stateDir, LOCAL_STACK_FILE);
  const filled = { ...env };
  for (const name of SERVICE_URL_SETTINGS)
    if (!filled[name] && typeof recorded[name] === "string") filled[name] = recorded[name];
  return filled;
}

// --- the local stack's service identities ---
// `npm start` generates a key pair per workload once and keeps them in this file (mode 0600) under
// its STATE_DIR: `{"gateway": "<SERVICE_IDENTITY_KEY of the gateway>", ..., "ops": "..."}`. The
// operator CLI takes its own from there unless SERVICE_IDENTITY_KEY is set.
export const LOCAL_IDENTITY_FILE = "service-identity.json";

/** The environment with SERVICE_IDENTITY_KEY, when unset, taken from a local stack's file, if any. */
export function withLocalStackIdentity(env: NodeJS.ProcessEnv, stateDir: string, name: string): NodeJS.ProcessEnv {
  if (env.SERVICE_IDENTITY_KEY) return env;
  const key = readStateFile(stateDir, LOCAL_IDENTITY_FILE)[name];
  return typeof key === "string" ? { ...env, SERVICE_IDENTITY_KEY: key } : env;
}
