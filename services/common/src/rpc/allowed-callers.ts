// Who may call which internal RPC: the one table every service's server enforces
// (services/common/src/rpc/service-identity.ts), by the caller's verified service identity.
// docs/security.md ("Internal calls") shows it as a table, checked against this file by a test.
//
// Rules: a method not listed here is refused to everyone; admin RPCs (partners, credentials, keys,
// the caregiver's acts, deliveries, the audit trail) are the operator CLI's (`ops`) alone, and a
// service is listed for an admin RPC only where it needs exactly that one (the webhook service reads
// a partner's endpoint and signing secret to deliver). grpc.health.v1.Health is open to anyone
// (probes and the gateway's /readyz), and is therefore not in this table.

/** Every workload that has an identity: the six services and the operator CLI. */
export const WORKLOADS = ["gateway", "auth", "connection", "file-intake", "webhook", "extraction", "ops"] as const;
export type Workload = (typeof WORKLOADS)[number];

/** The internal services (the audiences of tokens), by their Connect service's full name. */
export const SERVICE_OF: Readonly<Record<string, Workload>> = {
  "pi.auth.v1.AuthService": "auth",
  "pi.connection.v1.ConnectionService": "connection",
  "pi.fileintake.v1.FileIntakeService": "file-intake",
  "pi.webhook.v1.WebhookService": "webhook",
};

export type Plane = "runtime" | "admin";

export interface MethodRule {
  plane: Plane;
  callers: readonly Workload[];
}

const runtime = (...callers: Workload[]): MethodRule => ({ plane: "runtime", callers });
const admin = (...callers: Workload[]): MethodRule => ({ plane: "admin", callers });

export const ALLOWED_CALLERS: Readonly<Record<string, Readonly<Record<string, MethodRule>>>> = {
  "pi.auth.v1.AuthService": {
    IssueToken: runtime("gateway"),
    IssueTokens: runtime("gateway"),
    GetJwks: runtime("gateway"),
    ListRevocations: runtime("gateway"),
    ReportGatewayPosition: runtime("gateway"),
    CreatePartner: admin("ops"),
    SetPartnerStatus: admin("ops"),
    SetWebhookUrl: admin("ops"),
    CreateCredential: admin("ops"),
    RevokeCredential: admin("ops"),
    RotateSigningSecret: admin("ops"),
    RotateSigningKey: admin("ops"),
    RevokeSigningKey: admin("ops"),
    ListAuditRecords: admin("ops"),
    // Returns the partner's signing secret: the webhook service needs it to sign deliveries.
    GetWebhookTarget: admin("webhook"),
  },
  "pi.connection.v1.ConnectionService": {
    RequestConnection: runtime("gateway"),
    GetConnection: runtime("gateway"),
    RevokeConnection: runtime("gateway"),
    CheckActiveConnection: runtime("file-intake"),
    // POST /v1/test_helpers/connections/{id}/...: the partner's own test connections, by its verified bearer.
    ActOnTestConnection: runtime("gateway"),
    ApproveConnection: admin("ops"),
    DeclineConnection: admin("ops"),
    SeverConnection: admin("ops"),
    CreateElder: admin("ops"),
    GetInfo: admin("ops"),
  },
  "pi.fileintake.v1.FileIntakeService": {
    SubmitFile: runtime("gateway"),
    GetFile: runtime("gateway"),
    CheckStorageQuota: runtime("gateway"),
    TakeFileForExtraction: runtime("extraction"),
    TakeNextFileForExtraction: runtime("extraction"),
    ReadFileForExtraction: runtime("extraction"),
    RenewExtractionLease: runtime("extraction"),
    RecordExtraction: runtime("extraction"),
    ListFilesAwaitingExtraction: runtime("extraction"),
  },
  "pi.webhook.v1.WebhookService": {
    ListDeliveries: admin("ops"),
    GetDelivery: admin("ops"),
    ResendEvent: admin("ops"),
    RecoverDeliveries: admin("ops"),
    // GET /v1/events: the partner's own events, by the partner and mode of its verified bearer.
    ListEvents: runtime("gateway"),
  },
};

/** The services with admin RPCs: each serves them on a port of its own (rpc/server.ts, `*_ADMIN_PORT`). */
export const ADMIN_SERVICES: readonly Workload[] = Object.entries(ALLOWED_CALLERS)
  .filter(([, methods]) => Object.values(methods).some((r) => r.plane === "admin"))
  .map(([service]) => SERVICE_OF[service]!);

/** The rule of one method, or undefined when it is not listed (then nobody may call it). */
export function ruleFor(serviceTypeName: string, methodName: string): MethodRule | undefined {
  const methods = ALLOWED_CALLERS[serviceTypeName];
  return methods && Object.hasOwn(methods, methodName) ? methods[methodName] : undefined;
}

/** Whether `caller` may call the method. */
export function mayCall(caller: Workload, serviceTypeName: string, methodName: string): boolean {
  return ruleFor(serviceTypeName, methodName)?.callers.includes(caller) ?? false;
}

/**
 * The table as Markdown, one row per method: docs/security.md ("Internal calls") shows exactly this
 * (a unit test compares them), so the documentation cannot drift from what the services enforce.
 */
export function allowListMarkdown(): string {
  const rows = Object.entries(ALLOWED_CALLERS).flatMap(([service, methods]) =>
    Object.entries(methods).map(
      ([method, rule]) => `| ${SERVICE_OF[service]} | \`${method}\` | ${rule.plane} | ${rule.callers.join(", ")} |`,
    ),
  );
  return ["| service | RPC | plane | callers |", "|---|---|---|---|", ...rows].join("\n");
}
