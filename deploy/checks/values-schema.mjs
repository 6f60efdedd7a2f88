// The source of charts/partner-integration/values.schema.json (JSON Schema draft-07, which every
// Helm 3 reads). Strict on purpose: unknown keys are refused at the top level and inside every
// block, so a typo in a values file fails `helm install` instead of being ignored.
//
//   node deploy/checks/values-schema.mjs          rewrites values.schema.json
//   node deploy/checks/values-schema.mjs --check  fails when values.schema.json is stale
//
// The settings mirror services/common/src/runtime/settings.ts (types, bounds); test/deploy/chart.test.ts
// fails when a setting the services read is not wired through the chart.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const schemaFile = join(
  resolve(dirname(fileURLToPath(import.meta.url)), "..", ".."),
  "charts",
  "partner-integration",
  "values.schema.json",
);

/** An object with exactly these properties: an unknown key is refused. */
const strict = (properties, more = {}) => ({ type: "object", additionalProperties: false, ...more, properties });
const port = { type: "integer", minimum: 1, maximum: 65535 };
const posInt = { type: "integer", minimum: 1 };
const settings = {
  LOG_LEVEL: { type: "string", enum: ["trace", "debug", "info", "warn", "error", "fatal", "silent"] },
  DATA_NAMESPACE: {
    type: "string",
    pattern: "^[a-z][a-z0-9_]{0,30}$",
    description: "Prefix of database names, Kafka topics and consumer groups.",
  },
  GATEWAY_PORT: port,
  AUTH_SERVICE_PORT: port,
  CONNECTION_SERVICE_PORT: port,
  FILE_INTAKE_SERVICE_PORT: port,
  WEBHOOK_SERVICE_PORT: port,
  EXTRACTION_SERVICE_PORT: port,
  AUTH_ADMIN_PORT: port,
  CONNECTION_ADMIN_PORT: port,
  WEBHOOK_ADMIN_PORT: port,
  METRICS_PORT: { ...port, description: "Every process's Prometheus metrics (/metrics), on a port of its own." },
  METRICS_ENABLED: {
    type: "boolean",
    description: "false: no metrics recorded or served (to measure what they cost).",
  },
  ADDRESS_DOMAIN: { type: "string", pattern: "^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$" },
  ACCESS_TOKEN_TTL_SECONDS: posInt,
  TOKEN_ENDPOINT_URL: {
    type: "string",
    pattern: "^(https?://[^?#]+/oauth/token)?$",
    description: "The token endpoint's public URL; empty: from ingress.host.",
  },
  JWKS_REFRESH_SECONDS: posInt,
  RATE_LIMIT_V1_PER_SECOND: { type: "integer", minimum: 50 },
  RATE_LIMIT_TOKEN_PER_MINUTE: { type: "integer", minimum: 60 },
  TRUSTED_PROXY_HOPS: { type: "integer", minimum: 0, maximum: 10 },
  API_DEPRECATIONS: {
    type: "array",
    items: strict(
      {
        route: {
          type: "string",
          pattern: "^(/v[0-9]+|(GET|POST|PUT|PATCH|DELETE) /v[0-9]+(/([A-Za-z0-9_.-]+|\\{[A-Za-z0-9_]+\\}))+)$",
        },
        deprecation: { type: "string", minLength: 1, description: "An RFC 3339 instant with offset." },
        sunset: { type: "string", minLength: 1 },
        link: { type: "string", pattern: "^https?://" },
      },
      { required: ["route", "deprecation"] },
    ),
  },
  MAX_FILE_BYTES: posInt,
  UPLOAD_CONCURRENCY_PER_PARTNER: posInt,
  UPLOAD_CONCURRENCY_TOTAL: posInt,
  UPLOAD_MIN_BYTES_PER_SECOND: { type: "integer", minimum: 0 },
  UPLOAD_RATE_WINDOW_SECONDS: { type: "number", exclusiveMinimum: 0, maximum: 300 },
  IDEMPOTENCY_TTL_SECONDS: posInt,
  CONNECTION_PENDING_TTL_SECONDS: posInt,
  PENDING_CONNECTIONS_PER_PARTNER: {
    ...posInt,
    description: "Most connections one partner may hold pending with its live credentials at once (429 past it).",
  },
  TEST_PENDING_CONNECTIONS_PER_PARTNER: { ...posInt, description: "The same bound for its test credentials." },
  CONNECTIONS_OPENED_PER_PARTNER_PER_DAY: {
    ...posInt,
    description:
      "Most connections one partner may open (new addresses and reopenings) with its live credentials per UTC day (429 past it, until midnight UTC).",
  },
  TEST_CONNECTIONS_OPENED_PER_PARTNER_PER_DAY: { ...posInt, description: "The same bound for its test credentials." },
  CONNECTION_REOPEN_INTERVAL_SECONDS: {
    ...posInt,
    description: "A revoked or expired live connection reopens at most once per this period (429 within it).",
  },
  TEST_CONNECTION_REOPEN_INTERVAL_SECONDS: { ...posInt, description: "The same for test connections." },
  ENDED_CONNECTION_RETENTION_SECONDS: {
    ...posInt,
    description:
      "How long a revoked or expired connection is kept after its last change, then deleted (never less than the reopen interval is used).",
  },
  SANDBOX_APPROVAL_DELAY_SECONDS: { type: "integer", minimum: 0 },
  WEBHOOK_RETRY_BASE_SECONDS: { type: "number", exclusiveMinimum: 0 },
  WEBHOOK_RETRY_WINDOW_SECONDS: posInt,
  WEBHOOK_ATTEMPT_TIMEOUT_SECONDS: { type: "number", exclusiveMinimum: 0, maximum: 60 },
  WEBHOOK_ALLOW_INSECURE_URLS: { type: "boolean" },
  WEBHOOK_EVENT_RETENTION_SECONDS: {
    type: "integer",
    minimum: 2592000,
    description: "How long webhook events are kept for GET /v1/events (at least 30 days).",
  },
  WEBHOOK_TEST_EVENTS_PER_PARTNER: {
    ...posInt,
    description: "Of a partner's test events, only the newest this many are kept.",
  },
  KAFKA_SASL_MECHANISM: { type: "string", enum: ["scram-sha-256", "scram-sha-512"] },
  KAFKA_SSL: { type: "boolean" },
  FILE_RETENTION_SECONDS: {
    ...posInt,
    description: "How long a file's bytes, extraction result and metadata are kept after it was accepted.",
  },
  TEST_FILE_RETENTION_SECONDS: { ...posInt, description: "The same for test files (shorter)." },
  FILE_STORAGE_QUOTA_BYTES: {
    ...posInt,
    description: "What a partner's live files may hold, accepted and in flight together.",
  },
  TEST_FILE_STORAGE_QUOTA_BYTES: { ...posInt, description: "The same for its test files (far less)." },
  EXTRACTION_MEMORY_CEILING_MB: {
    type: "integer",
    minimum: 64,
    maximum: 16384,
    description: "The resident memory past which the child decoding a file is killed (the file fails).",
  },
  EXTRACTION_TIME_LIMIT_SECONDS: {
    type: "integer",
    minimum: 1,
    maximum: 3600,
    description: "The wall time past which the child decoding a file is killed.",
  },
  EXTRACTION_CPU_TIME_LIMIT_SECONDS: {
    type: "integer",
    minimum: 1,
    maximum: 3600,
    description: "The CPU time (user and system) past which the child decoding a file is killed.",
  },
  FILE_STORE_HIGH_WATER_BYTES: {
    ...posInt,
    description:
      "What all partners' files may hold together; past it uploads are 503. At most 80% of file-intake's database volume.",
  },
  AUDIT_RETENTION_SECONDS: { ...posInt, description: "How long the audit trail keeps a record." },
};
const clusterWide = [
  "DATA_NAMESPACE",
  "GATEWAY_PORT",
  "AUTH_SERVICE_PORT",
  "CONNECTION_SERVICE_PORT",
  "FILE_INTAKE_SERVICE_PORT",
  "WEBHOOK_SERVICE_PORT",
  "EXTRACTION_SERVICE_PORT",
  "AUTH_ADMIN_PORT",
  "CONNECTION_ADMIN_PORT",
  "WEBHOOK_ADMIN_PORT",
  "METRICS_PORT",
];
const serviceSettings = Object.fromEntries(Object.entries(settings).filter(([k]) => !clusterWide.includes(k)));
const quantity = { type: ["string", "number"] };
const definitions = {
  config: strict(settings, {
    description: "Settings of the operator contract, rendered as environment variables of every service.",
    required: Object.keys(settings),
  }),
  serviceConfig: strict(serviceSettings, {
    description: "Overrides of the top-level config for one service (ports and DATA_NAMESPACE are cluster-wide).",
  }),
  image: strict(
    {
      repository: { type: "string", minLength: 1 },
      tag: { type: ["string", "number"] },
      digest: {
        type: "string",
        pattern: "^$|^sha256:[a-f0-9]{64}$",
        description: "The image runs by this digest (repository:tag@digest).",
      },
      pullPolicy: { type: "string", enum: ["Always", "IfNotPresent", "Never"] },
    },
    { required: ["repository"] },
  ),
  resources: strict({
    requests: { type: "object", additionalProperties: quantity },
    limits: { type: "object", additionalProperties: quantity },
  }),
  autoscaling: strict(
    {
      enabled: { type: "boolean" },
      minReplicas: { type: "integer", minimum: 1 },
      maxReplicas: { type: "integer", minimum: 1 },
      targetCPUUtilizationPercentage: { type: "integer", minimum: 1, maximum: 100 },
    },
    { required: ["enabled"] },
  ),
  podDisruptionBudget: strict(
    {
      enabled: { type: "boolean" },
      minAvailable: { type: ["integer", "string"] },
      maxUnavailable: { type: ["integer", "string"] },
      unhealthyPodEvictionPolicy: {
        enum: ["AlwaysAllow", "IfHealthyBudget"],
        description: "AlwaysAllow: a pod that is not Ready never blocks a drain.",
      },
    },
    { required: ["enabled"] },
  ),
  extraEnv: {
    type: "array",
    items: { type: "object", required: ["name"], properties: { name: { type: "string", minLength: 1 } } },
  },
  mongodb: strict({
    persistence: strict(
      { size: { type: "string", pattern: "^$|^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$" } },
      { description: "This database's own volume size, instead of mongodb.persistence.size (empty: that one)." },
    ),
    external: strict({
      existingSecret: {
        type: "string",
        description: "A Secret holding this service's MONGODB_URI; set: no MongoDB is deployed for it.",
      },
      existingSecretKey: { type: "string", minLength: 1 },
      port: port,
    }),
    auth: strict(
      {
        rootExistingSecret: {
          type: "string",
          description: "A Secret with the root password, read by the database's pod only.",
        },
        rootExistingSecretKey: { type: "string", minLength: 1 },
        existingSecret: {
          type: "string",
          description: "A Secret with the service's own database password (at least 16 of A-Z a-z 0-9 . _ ~ -).",
        },
        existingSecretKey: { type: "string", minLength: 1 },
        auditRetentionExistingSecret: {
          type: "string",
          description:
            "auth only: a Secret with the password of the audit retention sweep's own user (at least 16 of A-Z a-z 0-9 . _ ~ -).",
        },
        auditRetentionExistingSecretKey: { type: "string", minLength: 1 },
      },
      {
        description:
          "Credentials of the in-cluster database: Secrets of yours, else generated and kept (generateSecrets).",
      },
    ),
  }),
  persistence: strict({
    enabled: { type: "boolean" },
    size: { type: "string", pattern: "^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$" },
    storageClass: { type: "string" },
    claimRetention: { enum: ["Retain", "Delete"] },
  }),
};
// A component's scheduling (pi.podCommon): its own affinity, anti-affinity, spread and priority.
definitions.scheduling = {
  affinity: { type: "object" },
  podAntiAffinity: { enum: ["", "preferred", "required"] },
  topologySpreadConstraints: {
    type: "array",
    items: { type: "object", required: ["maxSkew", "topologyKey", "whenUnsatisfiable"] },
  },
  priorityClassName: { type: "string" },
};
// A workload's service identity (docs/security.md, "Internal calls"): its Ed25519 key, generated
// and kept by the chart unless existingSecret names a Secret of the operator's, whose public key
// must then be given too (the chart cannot read it).
definitions.identity = strict({
  existingSecret: { type: "string" },
  existingSecretKey: { type: "string", minLength: 1 },
  publicKey: {
    type: "string",
    description: "With existingSecret: the public key, as a PEM or base64 of its SPKI DER.",
  },
});
const shape = ["enabled", "image", "replicas", "resources", "config", "autoscaling", "podDisruptionBudget"];
function service(extra = {}) {
  return strict(
    {
      enabled: { type: "boolean" },
      image: { $ref: "#/definitions/image" },
      replicas: { type: "integer", minimum: 0 },
      resources: { $ref: "#/definitions/resources" },
      config: { $ref: "#/definitions/serviceConfig" },
      autoscaling: { $ref: "#/definitions/autoscaling" },
      podDisruptionBudget: { $ref: "#/definitions/podDisruptionBudget" },
      extraEnv: { $ref: "#/definitions/extraEnv" },
      extraVolumes: { type: "array", items: { type: "object", required: ["name"] } },
      extraVolumeMounts: { type: "array", items: { type: "object", required: ["name", "mountPath"] } },
      identity: { $ref: "#/definitions/identity" },
      ...definitions.scheduling,
      ...extra,
    },
    { required: shape },
  );
}
const mongo = { mongodb: { $ref: "#/definitions/mongodb" } };
const labelSelector = strict({
  matchLabels: { type: "object", additionalProperties: { type: "string" } },
  matchExpressions: { type: "array", items: { type: "object" } },
});
const stringMap = { type: "object", additionalProperties: { type: "string" } };
const duration = { type: "string", pattern: "^([0-9]+(ms|s|m|h))+$" };
export const schema = {
  $schema: "http://json-schema.org/draft-07/schema#",
  title: "partner-integration chart values",
  type: "object",
  additionalProperties: false,
  definitions,
  properties: {
    global: { type: "object", description: "Reserved by Helm for parent charts." },
    fullnameOverride: { type: "string", maxLength: 30 },
    config: { $ref: "#/definitions/config" },
    generateSecrets: {
      enum: ["auto", "always", "never"],
      description:
        "auto: generate missing secrets only when the render can look up the cluster; always: also without a cluster (throwaway renders); never: every secret must be given.",
    },
    dataKeys: strict({
      value: {
        type: "string",
        pattern: "^(|[A-Za-z0-9_-]{1,32}:[A-Za-z0-9+/_-]{43}=?(,[A-Za-z0-9_-]{1,32}:[A-Za-z0-9+/_-]{43}=?)*)$",
        description:
          "DATA_KEYS, kid:base64key[,...] newest first; empty: existingSecret, or generated at the first install and kept.",
      },
      existingSecret: { type: "string" },
      existingSecretKey: { type: "string", minLength: 1 },
      generate: {
        type: "boolean",
        description:
          "Generate a key at the first install when neither value nor existingSecret is given; false: fail instead (GitOps).",
      },
    }),
    gateway: service(),
    auth: service({
      privateKeyJwt: {
        type: "boolean",
        description:
          "Partners may authenticate with private_key_jwt: the token endpoint's public URL must then be known (ingress.host, httpRoute.hostnames or config.TOKEN_ENDPOINT_URL), else the render fails.",
      },
      credentialPepper: strict({
        value: {
          type: "string",
          pattern: "^(|.{32,})$",
          description: "CREDENTIAL_PEPPER, at least 32 characters; empty: generated and kept.",
        },
        existingSecret: { type: "string" },
        existingSecretKey: { type: "string", minLength: 1 },
      }),
      ...mongo,
    }),
    connection: service(mongo),
    fileIntake: service(mongo),
    extraction: service(),
    webhook: service(mongo),
    ops: strict(
      {
        enabled: { type: "boolean" },
        image: { $ref: "#/definitions/image" },
        resources: { $ref: "#/definitions/resources" },
        extraEnv: { $ref: "#/definitions/extraEnv" },
        identity: { $ref: "#/definitions/identity" },
        ...definitions.scheduling,
      },
      {
        description:
          "The operator CLI as a workload of its own: an idle pod to `kubectl exec` into, with the ops identity.",
      },
    ),
    ingress: strict({
      enabled: { type: "boolean" },
      className: { type: "string" },
      controller: {
        enum: ["", "nginx", "traefik", "none"],
        description: "Which controller's annotations the chart adds; empty: from className.",
      },
      host: { type: "string", pattern: "^$|^[a-z0-9*]([a-z0-9.-]*[a-z0-9])?$" },
      annotations: { type: "object", additionalProperties: { type: "string" } },
      bodySizeMarginBytes: { type: "integer", minimum: 0 },
      docs: { type: "boolean", description: "Also route the OpenAPI document and the API reference." },
      https: strict({
        enabled: { type: "boolean" },
        redirect: { type: "boolean" },
        existingSecret: { type: "string", description: "A kubernetes.io/tls Secret of yours." },
        certManager: strict({ clusterIssuer: { type: "string" }, issuer: { type: "string" } }),
        selfSigned: strict({
          validityDays: { type: "integer", minimum: 1, maximum: 3650 },
          altNames: { type: "array", items: { type: "string", minLength: 1 } },
          ipAddresses: { type: "array", items: { type: "string", minLength: 1 } },
        }),
        traefik: strict({
          httpEntryPoint: { type: "string", minLength: 1 },
          httpsEntryPoint: { type: "string", minLength: 1 },
        }),
      }),
      tls: { type: "array", items: { type: "object" } },
    }),
    httpRoute: strict(
      {
        enabled: { type: "boolean" },
        annotations: stringMap,
        hostnames: { type: "array", items: { type: "string", pattern: "^[a-z0-9*]([a-z0-9.-]*[a-z0-9])?$" } },
        parentRefs: {
          type: "array",
          items: strict(
            {
              group: { type: "string" },
              kind: { type: "string" },
              name: { type: "string", minLength: 1 },
              namespace: { type: "string" },
              sectionName: { type: "string" },
              port: port,
            },
            { required: ["name"] },
          ),
        },
        gateway: strict({
          create: {
            type: "boolean",
            description:
              "Create a Gateway (<prefix>-partner-api) with an HTTPS listener holding the certificate of ingress.https.",
          },
          className: { type: "string" },
          annotations: stringMap,
          httpsPort: port,
          httpPort: port,
        }),
      },
      {
        description:
          "The partner API through Gateway API: an HTTPRoute with the Ingress's paths, host and certificate.",
      },
    ),
    mongodb: strict({
      image: { $ref: "#/definitions/image" },
      wiredTigerCacheSizeGB: { type: "number", minimum: 0.25 },
      standIn: strict({ enabled: { type: "boolean" }, image: { $ref: "#/definitions/image" } }),
      resources: { $ref: "#/definitions/resources" },
      persistence: { $ref: "#/definitions/persistence" },
      ...definitions.scheduling,
    }),
    kafka: strict({
      external: strict({ brokers: { type: "string", pattern: "^$|^[^,\\s]+:[0-9]+(,[^,\\s]+:[0-9]+)*$" } }),
      image: { $ref: "#/definitions/image" },
      replicas: { type: "integer", minimum: 1 },
      clusterId: { type: "string", pattern: "^[A-Za-z0-9_-]{22}$" },
      heapOpts: { type: "string" },
      resources: { $ref: "#/definitions/resources" },
      persistence: { $ref: "#/definitions/persistence" },
      auth: strict({ existingSecret: { type: "string" } }),
      setup: strict({ resources: { $ref: "#/definitions/resources" } }),
      ...definitions.scheduling,
      topics: strict({
        create: { type: "boolean" },
        replicationFactor: { type: "integer", minimum: 0 },
        partitions: strict({
          connectionEvents: { type: "integer", minimum: 1 },
          fileEvents: { type: "integer", minimum: 1 },
          partnerEvents: { type: "integer", minimum: 1 },
          auditEvents: { type: "integer", minimum: 1 },
        }),
        resources: { $ref: "#/definitions/resources" },
      }),
    }),
    networkPolicy: strict({
      enabled: { type: "boolean" },
      ingressController: strict({ namespaceSelector: labelSelector, podSelector: labelSelector }),
      metricsScraper: strict(
        { namespaceSelector: labelSelector, podSelector: labelSelector },
        { description: "Where the Prometheus that scrapes the metrics ports runs." },
      ),
      webhookEgress: strict({
        cidr: { type: "string" },
        except: { type: "array", items: { type: "string" } },
        ports: { type: "array", items: port, minItems: 1 },
      }),
      extraEgress: { type: "array", items: { type: "object" } },
      dns: strict(
        { to: { type: "array", minItems: 1, items: { type: "object" } } },
        { description: "The cluster's DNS: the only peers any pod may reach on port 53." },
      ),
    }),
    metrics: strict(
      {
        serviceMonitor: strict({
          enabled: { type: "boolean" },
          namespace: { type: "string" },
          labels: stringMap,
          interval: duration,
          scrapeTimeout: { anyOf: [{ const: "" }, duration] },
          honorLabels: { type: "boolean" },
          relabelings: { type: "array", items: { type: "object" } },
          metricRelabelings: { type: "array", items: { type: "object" } },
        }),
        prometheusRule: strict({
          enabled: { type: "boolean" },
          namespace: { type: "string" },
          labels: stringMap,
          runbookBaseUrl: { type: "string", minLength: 1 },
          slo: strict({
            availability: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 },
            latency: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 },
            latencyThresholdSeconds: {
              type: "string",
              pattern: "^[0-9]+(\\.[0-9]+)?$",
              description: "A bucket bound (le) of http_server_request_duration_seconds.",
            },
          }),
        }),
        dashboard: strict({
          enabled: { type: "boolean" },
          namespace: { type: "string" },
          labels: stringMap,
          annotations: stringMap,
        }),
      },
      {
        description:
          "The Prometheus Operator's objects (ServiceMonitors, a PrometheusRule) and a Grafana dashboard; /metrics is served whatever these say.",
      },
    ),
    serviceAccount: strict({ create: { type: "boolean" }, name: { type: "string" } }),
    podAnnotations: { type: "object", additionalProperties: { type: "string" } },
    podLabels: { type: "object", additionalProperties: { type: "string" } },
    nodeSelector: { type: "object", additionalProperties: { type: "string" } },
    tolerations: { type: "array", items: { type: "object" } },
    affinity: { type: "object" },
    podAntiAffinity: { enum: ["", "preferred", "required"] },
    topologySpread: strict(
      {
        enabled: { type: "boolean" },
        topologyKeys: { type: "array", items: { type: "string", minLength: 1 } },
        maxSkew: { type: "integer", minimum: 1 },
        whenUnsatisfiable: { enum: ["ScheduleAnyway", "DoNotSchedule"] },
      },
      { description: "Spread every component's replicas across these topology keys (nodes and zones)." },
    ),
    priorityClasses: {
      type: "array",
      items: strict(
        { name: { type: "string", minLength: 1 }, value: { type: "integer" }, description: { type: "string" } },
        { required: ["name", "value"] },
      ),
    },
    imagePullSecrets: { type: "array", items: { type: "object", required: ["name"] } },
  },
};

export const schemaText = () => `${JSON.stringify(schema, null, 2)}\n`;

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes("--check")) {
    if (readFileSync(schemaFile, "utf8") !== schemaText()) {
      console.error("values.schema.json is stale: run node deploy/checks/values-schema.mjs");
      process.exit(1);
    }
    console.log("values.schema.json is current");
  } else {
    writeFileSync(schemaFile, schemaText());
    console.log(`wrote ${schemaFile}`);
  }
}
