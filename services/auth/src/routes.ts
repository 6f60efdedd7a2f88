import { RpcError, Status } from "@pi/common/rpc/errors";
import type { Router } from "@pi/common/rpc/server";
import { authv1, eventsv1 } from "@pi/proto";
import { setTimeout as sleep } from "node:timers/promises";
import type { PublicKeys } from "@pi/common/rpc/service-identity";
import { emptyOutbox, insertIfNew } from "@pi/common/store/persistence";
import { MAX_REQUESTS_PER_BATCH } from "@pi/common/rpc/clients";
import { newId, newSecret } from "@pi/common/rules/ids";
import { tokenEndpointUrl, type Settings } from "@pi/common/runtime/settings";
import { tokensIssued, tokensRefused } from "@pi/common/runtime/metrics";
import type { AuditTrail } from "@pi/common/store/audit";
import type { Logger } from "@pi/common/runtime/logger";
import { webhookUrlRefusal } from "@pi/common/rules/webhook-url";
import { modeFromProto, modeToProto, type PartnerMode } from "@pi/common/rules/mode";
import { randomUUID } from "node:crypto";
import { auditQuery, storedRecordMessage, verifyStoredRecord, type AuditStore } from "./audit.js";
import { jwksProblem, type AssertionKeys } from "./assertion-keys.js";
import { checkAssertionClaims, claimedAssertion, usedJtiKey } from "./client-assertion.js";
import type { Authenticated, AuthenticationCache } from "./authentication-cache.js";
import type { KeyRing } from "./keys.js";
import { partnerEvent, type PartnerEventPublisher } from "./propagation.js";
import { grantScopes, isScope, RING1_SCOPES } from "./scopes.js";
import {
  DUMMY_HASH,
  FIRST_PEPPER_ID,
  hashNewSecret,
  hashSecret,
  secretMatches,
  type Peppers,
  type SecretSealer,
} from "./secrets.js";
import { DECOY_PARTNER_ID, type AuthStore, type CredentialDoc, type PartnerDoc } from "./store.js";
import { eachOnItsOwn } from "./token-batch.js";
import { reinstatementWaitMs, signAccessToken, TOKEN_AUDIENCE, TOKEN_ISSUER } from "./tokens.js";

const { AuthService, TokenFailure, PartnerStatus, ClientAuthMethod } = authv1;

export interface AuthDeps {
  store: AuthStore;
  keys: KeyRing;
  settings: Settings;
  peppers: Peppers;
  sealer: SecretSealer;
  events: PartnerEventPublisher;
  authentications: AuthenticationCache;
  assertionKeys: AssertionKeys;
  audit: {
    trail: AuditTrail;
    store: AuditStore;
    /** Every workload's identity keys (SERVICE_IDENTITY_PUBLIC_KEYS): each read checks each record's kept signature. */
    publicKeys: PublicKeys;
  };
  logger: Logger;
}

export const MAX_SIGNING_OVERLAP_SECONDS = 7 * 24 * 3600;

const failure = (value: authv1.TokenFailure) => ({ outcome: { case: "failure" as const, value } });

const authenticatedBy = (credential: CredentialDoc, partner: PartnerDoc): Authenticated => ({
  clientId: credential._id,
  partnerId: partner._id,
  mode: credential.mode,
  scopes: partner.scopes,
});

function stillSigning(partner: PartnerDoc, now = Date.now()) {
  return (partner.previousSigningSecrets ?? []).filter((p) => p.expiresAt.getTime() > now);
}

export default (deps: AuthDeps) => (router: Router) => {
  const { store, keys, settings, peppers, sealer } = deps;
  const { events, authentications, audit, assertionKeys } = deps;
  const { trail } = audit;
  const tokenEndpoint = tokenEndpointUrl(settings);

  async function tokenFor(authenticated: Authenticated, requested: string | undefined) {
    const grant = grantScopes(requested, authenticated.scopes);
    if (!grant.ok) return failure(TokenFailure.INVALID_SCOPE);
    const scope = grant.scopes.join(" ");
    const accessToken = await signAccessToken(keys, authenticated, scope, settings.ACCESS_TOKEN_TTL_SECONDS);
    return {
      outcome: {
        case: "token" as const,
        value: { accessToken, expiresIn: BigInt(settings.ACCESS_TOKEN_TTL_SECONDS), scope },
      },
    };
  }

  async function issueCredential(
    partnerId: string,
    mode: PartnerMode,
    keys?: Pick<CredentialDoc, "jwks" | "jwksUrl" | "jwksFetched">,
  ) {
    const clientId = newId("cli");
    const clientSecret = keys ? "" : newSecret(mode === "live" ? "sk_live" : "sk_test");
    await store.credentials.insertOne({
      _id: clientId,
      partnerId,
      mode,
      ...(keys
        ? { secretHash: DUMMY_HASH, pepperId: FIRST_PEPPER_ID, authMethod: "private_key_jwt" as const, ...keys }
        : hashNewSecret(peppers, clientSecret)),
      status: "active",
      createdAt: new Date(),
      ...emptyOutbox(),
      audit: [trail.entry({ action: "credential.create", actor: "operator", targets: [clientId, partnerId] })],
    });
    events.audit.credentials.afterWrite(clientId);
    return {
      clientId,
      clientSecret,
      mode: modeToProto(mode),
      authMethod: keys ? ClientAuthMethod.PRIVATE_KEY_JWT : ClientAuthMethod.CLIENT_SECRET,
    };
  }

  /** The decoy partner is invisible to the operator: it cannot be reinstated or given credentials. */
  function realId(id: string): string {
    if (id === DECOY_PARTNER_ID) throw new RpcError(`no such id ${id}`, Status.NOT_FOUND);
    return id;
  }

  async function partnerOrThrow(partnerId: string): Promise<PartnerDoc> {
    const partner = await store.partners.findOne({ _id: realId(partnerId) });
    if (!partner) throw new RpcError(`no partner ${partnerId}`, Status.NOT_FOUND);
    return partner;
  }

  function validWebhookUrl(url: string): string {
    const problem = webhookUrlRefusal(url, settings.WEBHOOK_ALLOW_INSECURE_URLS);
    if (problem) throw new RpcError(`webhook url ${problem}`, Status.INVALID_ARGUMENT);
    return url;
  }

  /** Counts the answer (pi_tokens_issued_total, pi_tokens_refused_total): a count only, never why or for whom. */
  async function issueToken(req: authv1.IssueTokenRequest) {
    const answer = await decideToken(req);
    if (answer.outcome.case === "token") tokensIssued.inc();
    else tokensRefused.inc();
    return answer;
  }

  /** The two reads by _id of every token request: the decoy partner for an unknown client (guarantee 5). */
  async function readClient(clientId: string) {
    const credential = await store.credentials.findOne({ _id: clientId });
    return { credential, partner: await store.partners.findOne({ _id: credential?.partnerId ?? DECOY_PARTNER_ID }) };
  }

  async function decideToken(req: authv1.IssueTokenRequest) {
    if (req.clientAssertion !== undefined) return issueTokenByAssertion(req, req.clientAssertion);
    const presented = hashSecret(peppers.byId.get(peppers.current)!, req.clientSecret);
    const known = authentications.get(req.clientId, presented);
    if (known) return tokenFor(known, req.scope);
    // Every failure makes the same two reads and the same hash comparison; one expression decides.
    const ticket = authentications.ticket();
    const { credential, partner } = await readClient(req.clientId);
    const secretOk = secretMatches(peppers, req.clientSecret, credential ?? undefined);
    if (!secretOk || !credential || credential.status !== "active" || !partner || partner.status !== "active")
      return failure(TokenFailure.INVALID_CLIENT);
    const authenticated = authenticatedBy(credential, partner);
    authentications.keep(ticket, presented, authenticated);
    return tokenFor(authenticated, req.scope);
  }

  /** private_key_jwt (RFC 7523 2.2). Every failure does the same work (guarantee 5); no cache: each assertion is good once. */
  async function issueTokenByAssertion(req: authv1.IssueTokenRequest, assertion: string) {
    const claimed = claimedAssertion(assertion);
    // A client_id beside the assertion must name the same client (RFC 7521 section 4.2).
    const clientId = claimed && (req.clientId === "" || req.clientId === claimed.clientId) ? claimed.clientId : "";
    // Read even for a malformed assertion (no client id: a miss), so that it costs the same.
    const { credential, partner } = await readClient(clientId);
    const usable = credential?.authMethod === "private_key_jwt" ? credential : undefined;
    const claims = await assertionKeys.verify(assertion, claimed, usable);
    const nowMs = Date.now();
    const check = claims
      ? checkAssertionClaims(claims, { clientId, audience: tokenEndpoint, now: Math.floor(nowMs / 1000) })
      : undefined;
    const accepted = check?.ok ? check.accepted : undefined;
    const standing = !!usable && usable.status === "active" && !!partner && partner.status === "active";
    // The jti is used up only by an assertion that passed everything else; any other request
    // inserts a decoy key that expires at once, so a failure costs the same write.
    const used =
      accepted && standing
        ? { _id: usedJtiKey(clientId, accepted.jti), expiresAt: new Date(accepted.exp * 1000) }
        : { _id: `~decoy:${randomUUID()}`, expiresAt: new Date(nowMs) };
    const firstUse = await insertIfNew(store.usedAssertions, used);
    if (!accepted || !standing || !firstUse || !usable || !partner) {
      deps.logger.info(
        {
          clientId: clientId || undefined,
          reason: !claimed
            ? "malformed"
            : !usable
              ? "no such private_key_jwt client"
              : !claims
                ? "no key verifies the signature"
                : check && !check.ok
                  ? check.reason
                  : !standing
                    ? "revoked or suspended"
                    : "jti already used",
        },
        "client assertion refused",
      );
      return failure(TokenFailure.INVALID_CLIENT);
    }
    return tokenFor(authenticatedBy(usable, partner), req.scope);
  }

  async function keySource(req: authv1.CreateCredentialRequest) {
    if (req.jwksJson !== undefined && req.jwksUrl !== undefined)
      throw new RpcError("give a JWK Set or its URL, not both", Status.INVALID_ARGUMENT);
    if (req.jwksJson !== undefined) {
      let jwks: unknown;
      try {
        jwks = JSON.parse(req.jwksJson);
      } catch {
        throw new RpcError("the JWK Set is not JSON", Status.INVALID_ARGUMENT);
      }
      const problem = await jwksProblem(jwks);
      if (problem) throw new RpcError(`the JWK Set ${problem}`, Status.INVALID_ARGUMENT);
      return { jwks: jwks as CredentialDoc["jwks"] };
    }
    if (req.jwksUrl !== undefined) {
      if (req.jwksUrl.length > 2048)
        throw new RpcError("the JWK Set URL is longer than 2048 characters", Status.INVALID_ARGUMENT);
      // Fetched once here, and stored: every replica verifies with it from the first request on.
      const fetched = await assertionKeys.fetchSet(req.jwksUrl);
      if ("problem" in fetched) throw new RpcError(fetched.problem, Status.INVALID_ARGUMENT);
      return { jwksUrl: req.jwksUrl, jwksFetched: fetched };
    }
    return undefined;
  }

  router.service(AuthService, {
    issueToken,

    async issueTokens(req) {
      if (req.requests.length > MAX_REQUESTS_PER_BATCH)
        throw new RpcError(`at most ${MAX_REQUESTS_PER_BATCH} requests per call`, Status.INVALID_ARGUMENT);
      return { responses: await eachOnItsOwn(req.requests, issueToken, failure(TokenFailure.UNAVAILABLE)) };
    },

    async getJwks() {
      // From the database: a replica that has not applied a key revocation yet must not serve the key.
      await keys.load();
      return { jwksJson: JSON.stringify(keys.jwks()), issuer: TOKEN_ISSUER, audience: TOKEN_AUDIENCE };
    },

    async reportGatewayPosition(req) {
      if (req.instanceId === "") throw new RpcError("instance_id is required", Status.INVALID_ARGUMENT);
      await events.report(req.instanceId, "gateway", req.nextOffsets, req.leaving);
      return {};
    },

    async rotateSigningKey() {
      const { added, retired } = await keys.rotate(
        2 * settings.JWKS_REFRESH_SECONDS * 1000,
        settings.ACCESS_TOKEN_TTL_SECONDS * 1000,
      );
      deps.logger.info({ kid: added.kid, activatesAt: added.activatesAt, retired }, "signing key added");
      return { kid: added.kid, activatesAt: BigInt(added.activatesAt!.getTime()), retiredKids: retired };
    },

    async listRevocations() {
      const [revoked, suspended, cutoffs, revokedKeys] = await Promise.all([
        store.credentials.find({ status: "revoked" }, { projection: { _id: 1 } }).toArray(),
        store.partners.find({ status: "suspended" }, { projection: { _id: 1 } }).toArray(),
        store.partners.find({ suspendedAt: { $exists: true } }, { projection: { _id: 1, suspendedAt: 1 } }).toArray(),
        store.revokedKeys.find({}, { projection: { _id: 1 } }).toArray(),
      ]);
      return {
        revokedClientIds: revoked.map((c) => c._id),
        suspendedPartnerIds: suspended.map((p) => p._id).filter((id) => id !== DECOY_PARTNER_ID),
        tokenCutoffs: cutoffs.map((p) => ({ partnerId: p._id, suspendedAt: BigInt(p.suspendedAt!.getTime()) })),
        revokedKids: revokedKeys.map((k) => k._id),
      };
    },

    revokeSigningKey: (req) => {
      const fields = { action: "signing_key.revoke", actor: "operator", targets: [req.kid] } as const;
      return trail.refusals(fields, async () => {
        const replacementKid = await keys.replaceIfSigning(req.kid);
        if (replacementKid === undefined) {
          if (req.kid !== "" && (await store.revokedKeys.findOne({ _id: req.kid }, { projection: { _id: 1 } })))
            return { kid: req.kid, replacementKid: "" };
          throw new RpcError(`no signing key ${req.kid}`, Status.NOT_FOUND);
        }
        const event = partnerEvent(eventsv1.PartnerEventKind.SIGNING_KEY_REVOKED, "", "", { kid: req.kid });
        const record = trail.entry({ ...fields, targets: [req.kid, replacementKid] });
        // Revoked at the same time by another call: that one publishes.
        await insertIfNew(store.revokedKeys, {
          _id: req.kid,
          revokedAt: new Date(),
          ...emptyOutbox(),
          outbox: [event],
          audit: [record],
        });
        await keys.remove(req.kid);
        const log = { what: "signing key revoked", fields: { kid: req.kid, replacementKid } };
        const propagation = await events.propagate("revokedKeys", req.kid, event, log);
        return { kid: req.kid, replacementKid, propagation };
      });
    },

    createPartner: (req) =>
      trail.refusals({ action: "partner.create", actor: "operator", targets: [] }, async () => {
        const name = req.name.trim();
        if (name === "" || name.length > 200)
          throw new RpcError("name must be 1 to 200 characters", Status.INVALID_ARGUMENT);
        const scopes = req.scopes.length === 0 ? [...RING1_SCOPES] : [...new Set(req.scopes)];
        const unknown = scopes.find((s) => !isScope(s));
        if (unknown !== undefined)
          throw new RpcError(
            `unknown scope ${JSON.stringify(unknown)}; allowed: ${RING1_SCOPES.join(" ")}`,
            Status.INVALID_ARGUMENT,
          );
        const webhookUrl = req.webhookUrl ? validWebhookUrl(req.webhookUrl) : null;
        const partnerId = newId("ptr");
        const signingSecret = newSecret("whsec");
        const now = new Date();
        await store.partners.insertOne({
          _id: partnerId,
          name,
          status: "active",
          scopes,
          webhookUrl,
          sealedSigningSecret: await sealer.seal(signingSecret, "webhook-signing-secret"),
          createdAt: now,
          updatedAt: now,
          ...emptyOutbox(),
          audit: [trail.entry({ action: "partner.create", actor: "operator", targets: [partnerId] }, now)],
        });
        events.audit.partners.afterWrite(partnerId);
        const live = await issueCredential(partnerId, "live");
        const test = await issueCredential(partnerId, "test");
        deps.logger.info({ partnerId }, "partner created");
        return { partnerId, live, test, signingSecret };
      }),

    async setPartnerStatus(req) {
      if (req.status !== PartnerStatus.ACTIVE && req.status !== PartnerStatus.SUSPENDED)
        throw new RpcError("status must be active or suspended", Status.INVALID_ARGUMENT);
      const suspend = req.status === PartnerStatus.SUSPENDED;
      const status = suspend ? "suspended" : "active";
      const action = suspend ? "partner.suspend" : "partner.reinstate";
      const fields = { action, actor: "operator", targets: [req.partnerId] } as const;
      return trail.refusals(fields, async () => {
        // A suspension is a revocation: the partner's tokens issued until then stay refused after a
        // reinstatement, by the time of its latest suspension, which every event carries.
        let suspendedAt = new Date();
        if (!suspend) {
          const partner = await partnerOrThrow(req.partnerId);
          suspendedAt = partner.suspendedAt ?? new Date(0);
          const wait = reinstatementWaitMs(partner.suspendedAt?.getTime(), Date.now());
          if (wait > 0) await sleep(wait);
        }
        const { PARTNER_SUSPENDED, PARTNER_REINSTATED } = eventsv1.PartnerEventKind;
        const kind = suspend ? PARTNER_SUSPENDED : PARTNER_REINSTATED;
        const at = suspend ? suspendedAt : new Date();
        const event = partnerEvent(kind, req.partnerId, "", { suspendedAt: suspendedAt.getTime() }, at);
        const updated = await store.partners.findOneAndUpdate(
          { _id: realId(req.partnerId) },
          {
            $set: { status, updatedAt: new Date(), ...(suspend ? { suspendedAt } : {}) },
            $push: { outbox: event, audit: trail.entry(fields) },
          },
        );
        if (!updated) throw new RpcError(`no partner ${req.partnerId}`, Status.NOT_FOUND);
        // This replica at once; the others when the event reaches them, which propagate waits for.
        authentications.clear();
        const log = { what: `partner ${status}`, fields: { partnerId: req.partnerId } };
        const propagation = await events.propagate("partners", req.partnerId, event, log);
        return { partnerId: req.partnerId, status: req.status, propagation };
      });
    },

    setWebhookUrl: (req) => {
      // The address itself is never recorded: it may carry a token of the partner's.
      const fields = { action: "partner.set_webhook", actor: "operator", targets: [req.partnerId] } as const;
      return trail.refusals(fields, async () => {
        const url = validWebhookUrl(req.url);
        const event = partnerEvent(eventsv1.PartnerEventKind.WEBHOOK_CHANGED, req.partnerId);
        const updated = await store.partners.findOneAndUpdate(
          { _id: realId(req.partnerId) },
          { $set: { webhookUrl: url, updatedAt: new Date() }, $push: { outbox: event, audit: trail.entry(fields) } },
        );
        if (!updated) throw new RpcError(`no partner ${req.partnerId}`, Status.NOT_FOUND);
        events.audit.partners.afterWrite(req.partnerId);
        // Published for 1.0.0 webhook replicas, which drop their cached target on it; nothing follows it
        // for the address now (a delivery asks for its target at each attempt): no wait.
        await events.partners.relay(req.partnerId);
        return { partnerId: req.partnerId, webhookUrl: url };
      });
    },

    createCredential: (req) =>
      trail.refusals({ action: "credential.create", actor: "operator", targets: [req.partnerId] }, async () => {
        const mode = modeFromProto(req.mode);
        if (!mode) throw new RpcError("mode must be live or test", Status.INVALID_ARGUMENT);
        await partnerOrThrow(req.partnerId);
        return { credential: await issueCredential(req.partnerId, mode, await keySource(req)) };
      }),

    revokeCredential: (req) => {
      const fields = { action: "credential.revoke", actor: "operator", targets: [req.clientId] } as const;
      return trail.refusals(fields, async () => {
        const credential = await store.credentials.findOne({ _id: req.clientId }, { projection: { partnerId: 1 } });
        if (!credential) throw new RpcError(`no credential ${req.clientId}`, Status.NOT_FOUND);
        const event = partnerEvent(eventsv1.PartnerEventKind.CREDENTIAL_REVOKED, credential.partnerId, req.clientId);
        const record = trail.entry({ ...fields, targets: [req.clientId, credential.partnerId] });
        // Credentials are never deleted: the one read above found it.
        await store.credentials.updateOne(
          { _id: req.clientId },
          { $set: { status: "revoked", revokedAt: new Date() }, $push: { outbox: event, audit: record } },
        );
        authentications.clear();
        const log = { what: "credential revoked", fields: { clientId: req.clientId } };
        const propagation = await events.propagate("credentials", req.clientId, event, log);
        return { clientId: req.clientId, propagation };
      });
    },

    async getWebhookTarget(req) {
      const partner = await partnerOrThrow(req.partnerId);
      return {
        partnerId: partner._id,
        webhookUrl: partner.webhookUrl ?? "",
        signingSecret: await sealer.unseal(partner.sealedSigningSecret, "webhook-signing-secret"),
        previousSigningSecrets: await Promise.all(
          stillSigning(partner).map(async (p) => ({
            secret: await sealer.unseal(p.sealed, "webhook-signing-secret"),
            expiresAt: BigInt(p.expiresAt.getTime()),
          })),
        ),
      };
    },

    rotateSigningSecret: (req) => {
      const fields = { action: "partner.rotate_signing_secret", actor: "operator", targets: [req.partnerId] } as const;
      return trail.refusals(fields, async () => {
        if (req.overlapSeconds < 0n || req.overlapSeconds > BigInt(MAX_SIGNING_OVERLAP_SECONDS))
          throw new RpcError(`overlap must be 0 to ${MAX_SIGNING_OVERLAP_SECONDS} seconds`, Status.INVALID_ARGUMENT);
        const partner = await partnerOrThrow(req.partnerId);
        const signingSecret = newSecret("whsec");
        const expiresAt = new Date(Date.now() + Number(req.overlapSeconds) * 1000);
        const previous = [{ sealed: partner.sealedSigningSecret, expiresAt }, ...stillSigning(partner)];
        const event = partnerEvent(eventsv1.PartnerEventKind.WEBHOOK_CHANGED, partner._id);
        const record = trail.entry(fields);
        // Check-and-set on the secret read: two rotations at once cannot lose one another's secret.
        const updated = await store.partners.findOneAndUpdate(
          { _id: partner._id, sealedSigningSecret: partner.sealedSigningSecret },
          {
            $set: {
              sealedSigningSecret: await sealer.seal(signingSecret, "webhook-signing-secret"),
              previousSigningSecrets: previous,
              updatedAt: new Date(),
            },
            $push: { outbox: event, audit: record },
          },
        );
        if (!updated)
          throw new RpcError("the signing secret was rotated meanwhile; run the rotation again", Status.ABORTED);
        events.audit.partners.afterWrite(partner._id);
        // Like setWebhookUrl's: nothing to wait for.
        await events.partners.relay(partner._id);
        deps.logger.info({ partnerId: partner._id, previousExpiresAt: expiresAt }, "webhook signing secret rotated");
        return { partnerId: partner._id, signingSecret, previousExpiresAt: BigInt(expiresAt.getTime()) };
      });
    },

    async listAuditRecords(req) {
      const docs = await audit.store.list(auditQuery(req));
      return {
        records: docs.map(storedRecordMessage),
        verifications: docs.map((doc) => verifyStoredRecord(doc, audit.publicKeys)),
      };
    },
  });
};
