import { RpcError, Status } from "@pi/common/rpc/errors";
import { authv1, type commonv1, connectionv1, eventsv1, webhookv1 } from "@pi/proto";
import type { AuthClient, ConnectionClient, WebhookClient } from "@pi/common/rpc/clients";
import { isPartnerMode, modeFromProto, modeToProto } from "@pi/common/rules/mode";
import { newId } from "@pi/common/rules/ids";
import { retry } from "@pi/common/background/retry";

// Each operator command: one internal call, the operator contract's JSON object back (tests call them).

export interface OpsClients {
  auth: AuthClient;
  connection: ConnectionClient;
  webhook: WebhookClient;
}

const nameOf = (names: Record<number, string>, value: number) => (value ? names[value]!.toLowerCase() : "unknown");

const deliveryStateName: Record<webhookv1.DeliveryState, string> = {
  [webhookv1.DeliveryState.UNSPECIFIED]: "pending",
  [webhookv1.DeliveryState.PENDING]: "pending",
  [webhookv1.DeliveryState.DELIVERED]: "delivered",
  [webhookv1.DeliveryState.FAILED]: "failed",
  // The contract has three states; an event kept because the partner had no webhook address was
  // never delivered and never will be, so it reads as failed, with 0 attempts (docs/webhooks.md).
  [webhookv1.DeliveryState.NO_ENDPOINT]: "failed",
};

export class UsageError extends Error {}

const OUTCOME_UNKNOWN = new Set([
  Status.UNAVAILABLE,
  Status.DEADLINE_EXCEEDED,
  Status.UNKNOWN,
  Status.INTERNAL,
  Status.ABORTED,
]);

/** Whether a caregiver act may have been applied unseen (so it is sent again with the same act id); any other answer is final. */
export const actOutcomeUnknown = (err: unknown) => OUTCOME_UNKNOWN.has(RpcError.from(err).code);

// An attempt may wait out a read lease a 1.0.0 replica granted during a rollout (docs/connections.md); resends go on
// for longer than the contract's 2 s only on a loaded machine, where giving up would leave the outcome unknown.
export const ACT_ATTEMPT_TIMEOUT_MS = 1_500;
export const ACT_RETRY_MS = 10_000;

/** `--scopes "connections:write files:write"` (commas also separate); absent means every Ring 1 scope. */
export function parseScopes(value: string | undefined): string[] {
  if (value === undefined) return [];
  const scopes = value.split(/[\s,]+/).filter(Boolean);
  if (scopes.length === 0) throw new UsageError("--scopes names no scope");
  return scopes;
}

/** An operator change that not every gateway or auth replica confirmed in time still stands; the operator is told. */
export function propagationWarning(p: authv1.Propagation | undefined): string | undefined {
  if (!p) return undefined;
  const lagging = [
    p.confirmed < p.gateways ? `${p.gateways - p.confirmed} of ${p.gateways} gateways` : "",
    p.authConfirmed < p.authReplicas ? `${p.authReplicas - p.authConfirmed} of ${p.authReplicas} auth replicas` : "",
  ].filter((s) => s !== "");
  if (lagging.length === 0) return undefined;
  return `warning: ${lagging.join(" and ")} had not confirmed the change after ${p.elapsedMs} ms; they apply it as soon as they read it`;
}

export function parseOverlapHours(value: string | undefined): number {
  if (value === undefined) return 24;
  const hours = Number(value);
  if (value.trim() === "" || !Number.isFinite(hours) || hours < 0 || hours > 168)
    throw new UsageError(`--overlap-hours must be a number of hours from 0 to 168, not ${JSON.stringify(value)}`);
  return hours;
}

export function parseSince(value: string): number {
  const ms = Date.parse(value);
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(value) || Number.isNaN(ms)) {
    throw new UsageError(
      `--since must be an ISO 8601 date-time with a zone (2026-01-31T12:00:00Z), not ${JSON.stringify(value)}`,
    );
  }
  return ms;
}

const iso = (ms: bigint) => new Date(Number(ms)).toISOString();
const isoOrNull = (ms: bigint) => (ms === 0n ? null : iso(ms));

export function parseLimit(value: string | undefined): number {
  if (value === undefined) return 100;
  if (!/^\d+$/.test(value.trim()) || Number(value) < 1 || Number(value) > 1000)
    throw new UsageError(`--limit must be a whole number from 1 to 1000, not ${JSON.stringify(value)}`);
  return Number(value);
}

export const AUDIT_NOT_CHECKED = "not checked (the auth service predates verification)";

export function auditRecordJson(r: eventsv1.AuditRecord, check?: { verified: boolean; reason: string }) {
  return {
    id: r.id,
    occurred_at: iso(r.occurredAt),
    actor: r.actor,
    action: r.action,
    targets: r.targets,
    outcome: nameOf(eventsv1.AuditOutcome, r.outcome),
    reason: r.reason || null,
    service: r.service,
    verified: check?.verified ?? false,
    verification: check?.reason ?? AUDIT_NOT_CHECKED,
  };
}

export function parseMode(value: string): commonv1.Mode {
  if (isPartnerMode(value)) return modeToProto(value);
  throw new UsageError(`--mode must be live or test, not ${JSON.stringify(value)}`);
}

export const commands = (c: OpsClients, warn: (line: string) => void = () => {}) => ({
  async info() {
    const res = await c.connection.getInfo({});
    return { address_domain: res.addressDomain, sandbox_elder_address: res.sandboxElderAddress };
  },

  async partnerCreate(opts: { name: string; webhookUrl?: string; scopes?: string }) {
    const res = await c.auth.createPartner({
      name: opts.name,
      webhookUrl: opts.webhookUrl,
      scopes: parseScopes(opts.scopes),
    });
    return {
      partner_id: res.partnerId,
      live: { client_id: res.live!.clientId, client_secret: res.live!.clientSecret },
      test: { client_id: res.test!.clientId, client_secret: res.test!.clientSecret },
      signing_secret: res.signingSecret,
    };
  },

  async partnerSetStatus(partnerId: string, status: "active" | "suspended") {
    const res = await c.auth.setPartnerStatus({
      partnerId,
      status: status === "active" ? authv1.PartnerStatus.ACTIVE : authv1.PartnerStatus.SUSPENDED,
    });
    const warning = propagationWarning(res.propagation);
    if (warning) warn(warning);
    return { partner_id: res.partnerId, status: res.status === authv1.PartnerStatus.ACTIVE ? "active" : "suspended" };
  },

  async partnerSetWebhook(partnerId: string, url: string) {
    const res = await c.auth.setWebhookUrl({ partnerId, url });
    return { partner_id: res.partnerId, webhook_url: res.webhookUrl };
  },

  async credentialCreate(partnerId: string, mode: string, keys: { jwksJson?: string; jwksUrl?: string } = {}) {
    if (keys.jwksJson !== undefined && keys.jwksUrl !== undefined)
      throw new UsageError("give --jwks-file or --jwks-url, not both");
    const res = await c.auth.createCredential({ partnerId, mode: parseMode(mode), ...keys });
    const cred = res.credential!;
    if (cred.authMethod === authv1.ClientAuthMethod.PRIVATE_KEY_JWT)
      return { client_id: cred.clientId, mode: modeFromProto(cred.mode) ?? "live", auth_method: "private_key_jwt" };
    return { client_id: cred.clientId, client_secret: cred.clientSecret, mode: modeFromProto(cred.mode) ?? "live" };
  },

  async credentialRevoke(clientId: string) {
    const res = await c.auth.revokeCredential({ clientId });
    const warning = propagationWarning(res.propagation);
    if (warning) warn(warning);
    return { client_id: res.clientId, status: "revoked" };
  },

  async keysRotate() {
    const res = await c.auth.rotateSigningKey({});
    return {
      kid: res.kid,
      activates_at: iso(res.activatesAt),
      retired_kids: res.retiredKids,
    };
  },

  /** An emergency revocation: every gateway refuses the key's tokens once the command returns. */
  async keysRevoke(kid: string) {
    const res = await c.auth.revokeSigningKey({ kid });
    const warning = propagationWarning(res.propagation);
    if (warning) warn(warning);
    return { kid: res.kid, status: "revoked", replacement_kid: res.replacementKid || null };
  },

  async elderCreate(address?: string) {
    const res = await c.connection.createElder({ address });
    return { elder_id: res.elderId, address: res.address };
  },

  /** The caregiver's tap: one act id, sent again on another replica while the outcome is unknown, until an answer. */
  async connectionAct(act: "approve" | "decline" | "sever", id: string, actId = newId("act")) {
    const call = c.connection[`${act}Connection`];
    const started = Date.now();
    const attempt = (): Promise<{ result?: connectionv1.CaregiverAct }> =>
      call({ id, actId }, { timeoutMs: ACT_ATTEMPT_TIMEOUT_MS });
    const res = await retry(`connection ${act}`, attempt, {
      attempts: 20,
      firstDelayMs: 20,
      maxDelayMs: 200,
      retryIf: (err) => actOutcomeUnknown(err) && Date.now() - started < ACT_RETRY_MS,
    });
    return { id: res.result!.id, internal_status: nameOf(connectionv1.InternalStatus, res.result!.internalStatus) };
  },

  async partnerRotateSigningSecret(partnerId: string, overlapHours?: string) {
    const overlapSeconds = BigInt(Math.round(parseOverlapHours(overlapHours) * 3600));
    const res = await c.auth.rotateSigningSecret({ partnerId, overlapSeconds });
    return {
      partner_id: res.partnerId,
      signing_secret: res.signingSecret,
      previous_expires_at: iso(res.previousExpiresAt),
    };
  },

  async webhookDeliveries(partnerId: string) {
    const res = await c.webhook.listDeliveries({ partnerId });
    const e = res.endpoint;
    return {
      deliveries: res.deliveries.map((d) => ({
        event_id: d.eventId,
        type: d.type,
        attempts: d.attempts,
        state: deliveryStateName[d.state],
        next_attempt_at: isoOrNull(d.nextAttemptAt),
      })),
      endpoint: {
        state: e?.failing ? "failing" : "ok",
        failing_since: isoOrNull(e?.failingSince ?? 0n),
        last_success_at: isoOrNull(e?.lastSuccessAt ?? 0n),
      },
    };
  },

  async webhookAttempts(eventId: string) {
    const res = await c.webhook.getDelivery({ eventId });
    const d = res.delivery!;
    return {
      event_id: d.eventId,
      partner_id: res.partnerId,
      type: d.type,
      state: deliveryStateName[d.state],
      next_attempt_at: isoOrNull(d.nextAttemptAt),
      attempts: d.attemptLog.map((a) => ({
        number: a.number,
        started_at: iso(a.startedAt),
        status: a.statusCode,
        duration_ms: a.durationMs,
        error: a.error || null,
        response_excerpt: a.responseExcerpt,
      })),
    };
  },

  async webhookResend(eventId: string) {
    const res = await c.webhook.resendEvent({ eventId });
    return {
      event_id: res.delivery!.eventId,
      state: deliveryStateName[res.delivery!.state],
      attempts: res.delivery!.attempts,
    };
  },

  async webhookRecover(partnerId: string, since: string) {
    const res = await c.webhook.recoverDeliveries({ partnerId, since: BigInt(parseSince(since)) });
    return { partner_id: partnerId, requeued: res.eventIds.length, event_ids: res.eventIds };
  },

  async audit(opts: { since?: string; target?: string; limit?: string } = {}) {
    const res = await c.auth.listAuditRecords({
      since: opts.since === undefined ? 0n : BigInt(parseSince(opts.since)),
      target: opts.target ?? "",
      limit: parseLimit(opts.limit),
    });
    return { records: res.records.map((r, i) => auditRecordJson(r, res.verifications[i])) };
  },
});

export function describeFailure(err: unknown, urls: readonly string[]): string {
  if (err instanceof UsageError) return err.message;
  if (err instanceof RpcError) {
    if (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED) {
      return `cannot reach the internal services (${urls.join(", ")}); is the stack running (npm start)?`;
    }
    if (err.code === Status.UNIMPLEMENTED) return "this command is not available yet on the running stack";
    return `${codeName(err.code)}: ${err.message}`;
  }
  return err instanceof Error ? err.message : String(err);
}

// The code as 1.0.0's CLI named it (NotFound, not NOT_FOUND): scripts may match the reason's first word.
const codeName = (code: Status) =>
  Status[code].toLowerCase().replace(/(?:^|_)(\w)/g, (_, c: string) => c.toUpperCase());
