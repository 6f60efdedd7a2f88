import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { create, toBinary } from "@bufbuild/protobuf";
import { authv1, commonv1, eventsv1 } from "@pi/proto";
import { newId, newSecret, topicName, type Logger, type Producer, type Settings } from "@pi/common";
import type { SigningKeys } from "./keys.js";
import { grantScopes, isScope, RING1_SCOPES } from "./scopes.js";
import { hashSecret, seal, secretMatches, unseal } from "./secrets.js";
import type { AuthStore, CredentialMode, PartnerDoc } from "./store.js";
import { signAccessToken, TOKEN_AUDIENCE, TOKEN_ISSUER } from "./tokens.js";
import { checkWebhookUrl } from "./webhook-url.js";

const { AuthService, TokenFailure, PartnerStatus } = authv1;
const { Mode } = commonv1;

export interface AuthDeps {
  store: AuthStore;
  keys: SigningKeys;
  settings: Settings;
  pepper: string;
  producer: Producer;
  logger: Logger;
}

const modeName = (m: commonv1.Mode): CredentialMode | undefined => (m === Mode.LIVE ? "live" : m === Mode.TEST ? "test" : undefined);
const modeEnum = (m: CredentialMode) => (m === "live" ? Mode.LIVE : Mode.TEST);

export default (deps: AuthDeps) => (router: ConnectRouter) => {
  const { store, keys, settings, pepper } = deps;
  // A partner that does not exist, looked up when the client is unknown, so every failure path
  // makes the same database round trips as a real one.
  const absentPartnerId = "ptr_absent";

  async function publishPartnerEvent(kind: eventsv1.PartnerEventKind, partnerId: string, clientId = ""): Promise<void> {
    const event = create(eventsv1.PartnerEventSchema, { kind, partnerId, clientId, occurredAt: BigInt(Date.now()) });
    await deps.producer.send({
      topic: topicName(settings.DATA_NAMESPACE, "partnerEvents"),
      messages: [{ key: partnerId, value: Buffer.from(toBinary(eventsv1.PartnerEventSchema, event)) }],
    });
  }

  async function issueCredential(partnerId: string, mode: CredentialMode) {
    const clientId = newId("cli");
    const clientSecret = newSecret(mode === "live" ? "sk_live" : "sk_test");
    await store.credentials.insertOne({
      _id: clientId,
      partnerId,
      mode,
      secretHash: hashSecret(pepper, clientSecret),
      status: "active",
      createdAt: new Date(),
    });
    return { clientId, clientSecret, mode: modeEnum(mode) };
  }

  async function partnerOrThrow(partnerId: string): Promise<PartnerDoc> {
    const partner = await store.partners.findOne({ _id: partnerId });
    if (!partner) throw new ConnectError(`no partner ${partnerId}`, Code.NotFound);
    return partner;
  }

  function validWebhookUrl(url: string): string {
    const problem = checkWebhookUrl(url, settings.WEBHOOK_ALLOW_INSECURE_URLS);
    if (problem) throw new ConnectError(`webhook url ${problem}`, Code.InvalidArgument);
    return url;
  }

  router.service(AuthService, {
    async issueToken(req) {
      const credential = await store.credentials.findOne({ _id: req.clientId });
      const partner = await store.partners.findOne({ _id: credential?.partnerId ?? absentPartnerId });
      const secretOk = secretMatches(pepper, req.clientSecret, credential?.secretHash);
      if (!secretOk || !credential || credential.status !== "active" || !partner || partner.status !== "active") {
        return { outcome: { case: "failure", value: TokenFailure.INVALID_CLIENT } };
      }
      const grant = grantScopes(req.scope, partner.scopes);
      if (!grant.ok) return { outcome: { case: "failure", value: TokenFailure.INVALID_SCOPE } };
      const scope = grant.scopes.join(" ");
      const accessToken = await signAccessToken(
        keys,
        { sub: partner._id, client_id: credential._id, mode: credential.mode, scope },
        settings.ACCESS_TOKEN_TTL_SECONDS,
      );
      return { outcome: { case: "token", value: { accessToken, expiresIn: BigInt(settings.ACCESS_TOKEN_TTL_SECONDS), scope } } };
    },

    async getJwks() {
      return { jwksJson: JSON.stringify(keys.jwks), issuer: TOKEN_ISSUER, audience: TOKEN_AUDIENCE };
    },

    async listRevocations() {
      const [revoked, suspended] = await Promise.all([
        store.credentials.find({ status: "revoked" }, { projection: { _id: 1 } }).toArray(),
        store.partners.find({ status: "suspended" }, { projection: { _id: 1 } }).toArray(),
      ]);
      return { revokedClientIds: revoked.map((c) => c._id), suspendedPartnerIds: suspended.map((p) => p._id) };
    },

    async createPartner(req) {
      const name = req.name.trim();
      if (name === "" || name.length > 200) throw new ConnectError("name must be 1 to 200 characters", Code.InvalidArgument);
      const scopes = req.scopes.length === 0 ? [...RING1_SCOPES] : [...new Set(req.scopes)];
      const unknown = scopes.find((s) => !isScope(s));
      if (unknown !== undefined) throw new ConnectError(`unknown scope ${JSON.stringify(unknown)}; allowed: ${RING1_SCOPES.join(" ")}`, Code.InvalidArgument);
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
        sealedSigningSecret: seal(pepper, signingSecret),
        createdAt: now,
        updatedAt: now,
      });
      const live = await issueCredential(partnerId, "live");
      const test = await issueCredential(partnerId, "test");
      deps.logger.info({ partnerId }, "partner created");
      return { partnerId, live, test, signingSecret };
    },

    async setPartnerStatus(req) {
      if (req.status !== PartnerStatus.ACTIVE && req.status !== PartnerStatus.SUSPENDED) {
        throw new ConnectError("status must be active or suspended", Code.InvalidArgument);
      }
      const status = req.status === PartnerStatus.ACTIVE ? "active" : "suspended";
      const updated = await store.partners.findOneAndUpdate(
        { _id: req.partnerId },
        { $set: { status, updatedAt: new Date() } },
        { returnDocument: "after" },
      );
      if (!updated) throw new ConnectError(`no partner ${req.partnerId}`, Code.NotFound);
      await publishPartnerEvent(
        status === "active" ? eventsv1.PartnerEventKind.PARTNER_REINSTATED : eventsv1.PartnerEventKind.PARTNER_SUSPENDED,
        req.partnerId,
      );
      deps.logger.info({ partnerId: req.partnerId, status }, "partner status set");
      return { partnerId: req.partnerId, status: req.status };
    },

    async setWebhookUrl(req) {
      const url = validWebhookUrl(req.url);
      const updated = await store.partners.findOneAndUpdate({ _id: req.partnerId }, { $set: { webhookUrl: url, updatedAt: new Date() } });
      if (!updated) throw new ConnectError(`no partner ${req.partnerId}`, Code.NotFound);
      await publishPartnerEvent(eventsv1.PartnerEventKind.WEBHOOK_CHANGED, req.partnerId);
      return { partnerId: req.partnerId, webhookUrl: url };
    },

    async createCredential(req) {
      const mode = modeName(req.mode);
      if (!mode) throw new ConnectError("mode must be live or test", Code.InvalidArgument);
      await partnerOrThrow(req.partnerId);
      return { credential: await issueCredential(req.partnerId, mode) };
    },

    async revokeCredential(req) {
      const updated = await store.credentials.findOneAndUpdate(
        { _id: req.clientId },
        { $set: { status: "revoked", revokedAt: new Date() } },
      );
      if (!updated) throw new ConnectError(`no credential ${req.clientId}`, Code.NotFound);
      await publishPartnerEvent(eventsv1.PartnerEventKind.CREDENTIAL_REVOKED, updated.partnerId, req.clientId);
      deps.logger.info({ clientId: req.clientId }, "credential revoked");
      return { clientId: req.clientId };
    },

    async getWebhookTarget(req) {
      const partner = await partnerOrThrow(req.partnerId);
      return {
        partnerId: partner._id,
        webhookUrl: partner.webhookUrl ?? "",
        signingSecret: unseal(pepper, partner.sealedSigningSecret),
      };
    },
  });
};
