// Who may call which internal RPC, by the caller's verified service identity (service-identity.ts);
// docs/security.md ("Internal calls") shows this table, and a test compares them. A method not listed
// is refused to everyone; admin RPCs (partners, credentials, keys, the caregiver's acts, deliveries,
// the audit trail) are the operator CLI's alone, but where a service needs exactly one. The health
// checks are open to anyone (probes, the gateway's /readyz), and so not in this table.

/** Every workload that has an identity: the six services and the operator CLI. */
export const WORKLOADS = ["gateway", "auth", "connection", "file-intake", "webhook", "extraction", "ops"] as const;
export type Workload = (typeof WORKLOADS)[number];

/** The internal services (the audiences of tokens), by their gRPC service's full name. */
export const SERVICE_OF: Readonly<Record<string, Workload>> = {
  "pi.auth.v1.AuthService": "auth",
  "pi.connection.v1.ConnectionService": "connection",
  "pi.fileintake.v1.FileIntakeService": "file-intake",
  "pi.webhook.v1.WebhookService": "webhook",
};

interface MethodRule {
  plane: "runtime" | "admin";
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
    GetConnections: runtime("gateway"),
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
