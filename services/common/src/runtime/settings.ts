import { z } from "zod";
import { parseDataKeys, parseIdList } from "../store/data-keys.js";
import { parseServiceUrls } from "../rpc/service-urls.js";
import { parseOwnIdentity, parsePublicKeys, requireIdentity } from "../rpc/service-identity.js";

// Every setting of the operator contract (docs/running.md and the pages named below), plus the internal
// addresses, in one schema; each service validates the whole set at start.
const int = (min: number, max = Number.MAX_SAFE_INTEGER) => z.coerce.number().int().min(min).max(max);
const port = int(0, 65535);
const positiveInt = int(1);
const bool = z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1");
// Checked by its own parser, kept as the text given; a message names what is wrong, never a key.
const checkedBy = (parse: (value: string) => unknown) =>
  z.string().superRefine((value, ctx) => {
    try {
      parse(value);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: (err as Error).message });
    }
  });
const serviceUrls = checkedBy(parseServiceUrls);
const mongoUri = z.string().regex(/^mongodb(\+srv)?:\/\//, "must be a mongodb:// URI");

/** CREDENTIAL_PEPPERS: `id:pepper[,id:pepper...]`, newest first; a pepper has at least 32 characters and no ",". */
export const parsePeppers = (text: string): { id: string; pepper: string }[] =>
  parseIdList(text, "pepper", (v) => (v.length < 32 ? "must be at least 32 characters" : undefined)).map(
    ({ id, value }) => ({ id, pepper: value }),
  );

// API_DEPRECATIONS: a JSON array of rules, each deprecating "/vN" or one operation (docs/edge.md, "Versioning").
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
  // The notice period (our choice; the spec leaves it open).
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
  EXTRACTION_SERVICE_PORT: port.default(50055),
  SERVICE_HOST: z.string().min(1).default("127.0.0.1"),
  AUTH_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50051"),
  CONNECTION_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50052"),
  FILE_INTAKE_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50053"),
  WEBHOOK_SERVICE_URL: serviceUrls.default("http://127.0.0.1:50054"),
  AUTH_ADMIN_PORT: port.default(50061),
  CONNECTION_ADMIN_PORT: port.default(50062),
  WEBHOOK_ADMIN_PORT: port.default(50064),
  AUTH_ADMIN_URL: serviceUrls.default("http://127.0.0.1:50061"),
  CONNECTION_ADMIN_URL: serviceUrls.default("http://127.0.0.1:50062"),
  WEBHOOK_ADMIN_URL: serviceUrls.default("http://127.0.0.1:50064"),

  METRICS_PORT: port.default(9464),
  METRICS_ENABLED: bool.default(true),

  MONGODB_URI: mongoUri.default("mongodb://127.0.0.1:27017/"),
  KAFKA_BROKERS: z
    .string()
    .regex(/^[^,\s]+:\d+(,[^,\s]+:\d+)*$/, "must be host:port[,host:port...]")
    .default("127.0.0.1:9092"),
  // Prefix of databases, topics and consumer groups: several stacks can share one MongoDB and Kafka.
  DATA_NAMESPACE: z
    .string()
    .regex(/^[a-z][a-z0-9_]{0,30}$/, "must be lowercase letters, digits, _")
    .default("pi"),

  EXTRACTION_MEMORY_CEILING_MB: int(64, 16384).default(512),
  EXTRACTION_TIME_LIMIT_SECONDS: int(1, 3600).default(60),
  EXTRACTION_CPU_TIME_LIMIT_SECONDS: int(1, 3600).default(30),

  ADDRESS_DOMAIN: z
    .string()
    .regex(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/, "must be a lowercase DNS name")
    .default("elders.example"),
  ACCESS_TOKEN_TTL_SECONDS: positiveInt.default(900),
  // The audience of client assertions and, without /oauth/token, the issuer. Unset: the local stack's.
  TOKEN_ENDPOINT_URL: z
    .url({ protocol: /^https?$/ })
    .refine(
      (u) => new URL(u).pathname.endsWith("/oauth/token") && !u.includes("?") && !u.includes("#"),
      "must be an http(s) URL ending in /oauth/token",
    )
    .optional(),
  JWKS_REFRESH_SECONDS: positiveInt.default(30),
  RATE_LIMIT_V1_PER_SECOND: int(50).default(100),
  RATE_LIMIT_TOKEN_PER_MINUTE: int(60).default(120),
  // Proxies in front of the gateway that append to X-Forwarded-For; 0: the header is ignored.
  TRUSTED_PROXY_HOPS: int(0, 10).default(0),
  API_DEPRECATIONS: deprecations.default([]),
  // "25 MB" is read as 25 MiB, the more generous reading, so no "25 MB" file is refused.
  MAX_FILE_BYTES: positiveInt.default(25 * 1024 * 1024),
  UPLOAD_CONCURRENCY_PER_PARTNER: positiveInt.default(8),
  UPLOAD_CONCURRENCY_TOTAL: positiveInt.default(64),
  UPLOAD_MIN_BYTES_PER_SECOND: int(0).default(16 * 1024),
  UPLOAD_RATE_WINDOW_SECONDS: z.coerce.number().positive().max(300).default(10),
  IDEMPOTENCY_TTL_SECONDS: positiveInt.default(86400),
  CONNECTION_PENDING_TTL_SECONDS: positiveInt.default(2592000),
  // Per partner and mode (docs/connections.md, "Bounds"); a decline reads as pending.
  PENDING_CONNECTIONS_PER_PARTNER: positiveInt.default(1000),
  TEST_PENDING_CONNECTIONS_PER_PARTNER: positiveInt.default(100),
  // Bounds what a POST-DELETE loop leaves behind (the pending bound frees a slot at each DELETE).
  CONNECTIONS_OPENED_PER_PARTNER_PER_DAY: positiveInt.default(1000),
  TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY: positiveInt.default(100),
  // How often an ended (partner, address) connection may reopen; a test one has no caregiver to ask.
  CONNECTION_REOPEN_INTERVAL_SECONDS: positiveInt.default(2592000),
  TEST_CONNECTION_REOPEN_INTERVAL_SECONDS: positiveInt.default(60),
  ENDED_CONNECTION_RETENTION_SECONDS: positiveInt.default(2 * 365 * 86400),
  SANDBOX_APPROVAL_DELAY_SECONDS: int(0).default(30),
  WEBHOOK_RETRY_BASE_SECONDS: z.coerce.number().positive().default(30),
  WEBHOOK_RETRY_WINDOW_SECONDS: positiveInt.default(86400),
  WEBHOOK_ALLOW_INSECURE_URLS: bool.default(false),
  WEBHOOK_ATTEMPT_TIMEOUT_SECONDS: z.coerce.number().positive().max(60).default(10),
  // At least the 30 days partners are promised (docs/webhooks.md, "Retention").
  WEBHOOK_EVENT_RETENTION_SECONDS: int(30 * 86400).default(30 * 86400),
  WEBHOOK_TEST_EVENTS_PER_PARTNER: positiveInt.default(10_000),

  // This workload's own Kafka user (SASL/SCRAM; docs/security.md, "Kafka"): both or neither.
  KAFKA_USERNAME: z.string().min(1).optional(),
  KAFKA_PASSWORD: z.string().min(1).optional(),
  KAFKA_SASL_MECHANISM: z.enum(["scram-sha-256", "scram-sha-512"]).default("scram-sha-256"),
  KAFKA_SSL: bool.default(false),

  // Required by auth: this one is "p1", CREDENTIAL_PEPPERS holds newer ones.
  CREDENTIAL_PEPPER: z.string().min(32, "must be at least 32 characters").optional(),
  CREDENTIAL_PEPPERS: checkedBy(parsePeppers).optional(),
  // Key-encryption keys of health data and sealed secrets (data-keys.ts); required by auth and file-intake.
  DATA_KEYS: checkedBy(parseDataKeys).optional(),
  FILE_RETENTION_SECONDS: positiveInt.default(30 * 86400),
  TEST_FILE_RETENTION_SECONDS: positiveInt.default(86400),
  FILE_STORAGE_QUOTA_BYTES: positiveInt.default(10 * 1024 ** 3),
  TEST_FILE_STORAGE_QUOTA_BYTES: positiveInt.default(256 * 1024 ** 2),
  FILE_STORE_HIGH_WATER_BYTES: positiveInt.default(16 * 1024 ** 3),
  // 6 years, HIPAA's retention of compliance records (docs/security.md, "Audit trail").
  AUDIT_RETENTION_SECONDS: positiveInt.default(6 * 365 * 86400),
  // The audit sweep's own database user (role auditRetention), so the service's can only append.
  AUDIT_RETENTION_MONGODB_URI: mongoUri.optional(),

  SERVICE_IDENTITY_KEY: checkedBy(parseOwnIdentity).optional(),
  SERVICE_IDENTITY_PUBLIC_KEYS: checkedBy(parsePublicKeys).optional(),
});

export type Settings = z.infer<typeof settingsSchema>;

export function tokenEndpointUrl(settings: Pick<Settings, "TOKEN_ENDPOINT_URL" | "GATEWAY_PORT">): string {
  return settings.TOKEN_ENDPOINT_URL ?? `http://127.0.0.1:${settings.GATEWAY_PORT}/oauth/token`;
}

/** The authorization server's issuer identifier (RFC 8414): the token endpoint's URL without /oauth/token. */
export function authorizationServerIssuer(settings: Pick<Settings, "TOKEN_ENDPOINT_URL" | "GATEWAY_PORT">): string {
  return tokenEndpointUrl(settings).replace(/\/oauth\/token$/, "");
}

export class SettingsError extends Error {}

export function parseSettings(env: NodeJS.ProcessEnv = process.env): Settings {
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ""));
  const result = settingsSchema.safeParse(present);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new SettingsError(`invalid setting ${issue.path.join(".")}: ${issue.message}`);
  }
  return result.data;
}

/** A bad setting ends the process with its one-line reason on stderr, exit status 2. */
export function refuseSetting(err: Error): never {
  process.stderr.write(`${err.message}\n`);
  process.exit(2);
}

/** For a workload's start: the settings, its own identity among them (requireIdentity), or the process ends with the reason. */
export function loadSettings(workload?: string): Settings {
  try {
    const settings = parseSettings();
    if (workload) requireIdentity(settings, workload);
    return settings;
  } catch (err) {
    return refuseSetting(err as Error);
  }
}
