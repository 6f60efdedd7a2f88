import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { exportJWK, generateKeyPair, createLocalJWKSet, jwtVerify } from "jose";
import { MongoClient, type Db } from "mongodb";
import { commonv1 } from "@pi/proto";
import { clientsFor } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import { LocalKeyWrapper, newDataKeysEntry } from "@pi/common/store/data-keys";
import { newSecret } from "@pi/common/rules/ids";
import { SettingsError, type Settings } from "@pi/common/runtime/settings";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Workload } from "@pi/common/rpc/allowed-callers";
import { startAuthService } from "../src/service.js";
import { hashSecret, SecretSealer } from "../src/secrets.js";
import type { CredentialDoc, PartnerDoc } from "../src/store.js";
import type { SigningKeyDoc } from "../src/keys.js";
import { TOKEN_AUDIENCE, TOKEN_ISSUER } from "../src/tokens.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";

// Stored secrets across key changes: signing secrets and the JWT private key sealed under the KEK
// k1 open at start; then a KEK rotation and a new
// pepper, with everything re-sealed under the new KEK at start; and a regenerated KEK refused.

let settings: Settings;
let mongo: MongoClient;
let db: Db;
let running: RunningService | undefined;
const partnerId = "ptr_reseal0000000000000001";
const clientId = "cli_reseal0000000000000001";
const clientSecret = newSecret("sk_live");
const future = new Date(Date.now() + 3600_000);

async function start(overrides: Partial<Settings> = {}) {
  await running?.stop();
  running = undefined;
  const s = { ...settings, ...overrides };
  running = await startAuthService(s, createLogger("auth", s.LOG_LEVEL));
  // Each RPC as the workload that may call it (services/common/src/rpc/allowed-callers.ts).
  const clients = (name: Workload) => clientsFor({ ...as(s, name), ...addressOf("auth", running!) });
  return {
    ops: clients("ops").authAdmin(),
    gateway: clients("gateway").auth(),
    webhook: clients("webhook").authAdmin(),
  };
}

const sealedValues = async () => ({
  partners: (await db.collection<PartnerDoc>("partners").find().toArray()).flatMap((p) => [
    p.sealedSigningSecret,
    ...(p.previousSigningSecrets ?? []).map((s) => s.sealed),
  ]),
  keys: (await db.collection<SigningKeyDoc>("signing_keys").find().toArray()).map((k) => k.sealedPrivateJwk),
});

async function tokenVerifies({ gateway: auth }: Awaited<ReturnType<typeof start>>, id: string, secret: string) {
  const res = await auth.issueToken({ clientId: id, clientSecret: secret });
  if (res.outcome.case !== "token") return false;
  const jwks = createLocalJWKSet(JSON.parse((await auth.getJwks({})).jwksJson) as { keys: [] });
  await jwtVerify(res.outcome.value.accessToken, jwks, { issuer: TOKEN_ISSUER, audience: TOKEN_AUDIENCE });
  return true;
}

beforeAll(async () => {
  settings = testSettings();
  mongo = await MongoClient.connect(settings.MONGODB_URI);
  db = mongo.db(databaseName(settings.DATA_NAMESPACE, "auth"));
  const pepper = settings.CREDENTIAL_PEPPER!;
  const sealer = new SecretSealer(LocalKeyWrapper.fromSetting(settings.DATA_KEYS!));
  const { publicKey, privateKey } = await generateKeyPair("ES256", { extractable: true });
  await db.collection<SigningKeyDoc>("signing_keys").insertOne({
    _id: "first",
    kid: "key_first",
    publicJwk: { ...(await exportJWK(publicKey)), kid: "key_first", alg: "ES256", use: "sig" },
    sealedPrivateJwk: await sealer.seal(JSON.stringify(await exportJWK(privateKey)), "token-signing-key"),
    createdAt: new Date(0),
    activatesAt: new Date(0),
  });
  const now = new Date();
  await db.collection<PartnerDoc>("partners").insertMany([
    {
      _id: partnerId,
      name: "Reseal Clinic",
      status: "active",
      scopes: ["connections:write", "files:write"],
      webhookUrl: null,
      sealedSigningSecret: await sealer.seal("whsec_current", "webhook-signing-secret"),
      previousSigningSecrets: [
        { sealed: await sealer.seal("whsec_previous", "webhook-signing-secret"), expiresAt: future },
      ],
      createdAt: now,
      updatedAt: now,
      outbox: [],
    },
    {
      _id: "ptr~decoy",
      name: "decoy",
      status: "suspended",
      scopes: [],
      webhookUrl: null,
      sealedSigningSecret: await sealer.seal("decoy", "webhook-signing-secret"),
      createdAt: now,
      updatedAt: now,
      outbox: [],
    },
  ]);
  await db.collection<CredentialDoc>("credentials").insertOne({
    _id: clientId,
    partnerId,
    mode: "live",
    secretHash: hashSecret(pepper, clientSecret),
    pepperId: "p1",
    status: "active",
    createdAt: now,
    outbox: [],
  });
});

afterAll(async () => {
  await running?.stop();
  await db?.dropDatabase();
  await mongo?.close();
});

describe("stored secrets across key changes", () => {
  it("values sealed under the KEK open at start and stay as they are; the credential's hash verifies", async () => {
    const before = await sealedValues();
    expect([...before.partners, ...before.keys].every((v) => v.startsWith("v2.k1."))).toBe(true);

    const auth = await start();
    const target = await auth.webhook.getWebhookTarget({ partnerId });
    expect(target.signingSecret).toBe("whsec_current");
    expect(target.previousSigningSecrets.map((p) => p.secret)).toEqual(["whsec_previous"]);
    expect(await tokenVerifies(auth, clientId, clientSecret)).toBe(true);
    expect(JSON.parse((await auth.gateway.getJwks({})).jwksJson).keys.map((k: { kid: string }) => k.kid)).toEqual([
      "key_first",
    ]);

    expect(await sealedValues()).toEqual(before);
  });

  it("a KEK rotation (a new key in front) and a new pepper: everything still opens and verifies, a start re-seals with the new KEK, new hashes name the new pepper", async () => {
    const rotated = {
      DATA_KEYS: `${newDataKeysEntry("k2")},${settings.DATA_KEYS!}`,
      CREDENTIAL_PEPPERS: `p2:${"n".repeat(40)}`,
    };
    const auth = await start(rotated);
    expect((await auth.webhook.getWebhookTarget({ partnerId })).signingSecret).toBe("whsec_current");
    expect(await tokenVerifies(auth, clientId, clientSecret)).toBe(true);
    for (const v of Object.values(await sealedValues()).flat()) expect(v).toMatch(/^v2\.k2\./);

    const fresh = (await auth.ops.createCredential({ partnerId, mode: commonv1.Mode.LIVE })).credential!;
    expect(await db.collection<CredentialDoc>("credentials").findOne({ _id: fresh.clientId })).toMatchObject({
      pepperId: "p2",
      secretHash: hashSecret("n".repeat(40), fresh.clientSecret),
    });
    expect(await tokenVerifies(auth, fresh.clientId, fresh.clientSecret)).toBe(true);
    // The old KEK can go now: nothing is sealed under it any more.
    const onlyNew = await start({ ...rotated, DATA_KEYS: rotated.DATA_KEYS.split(",")[0]! });
    expect((await onlyNew.webhook.getWebhookTarget({ partnerId })).previousSigningSecrets.map((p) => p.secret)).toEqual(
      ["whsec_previous"],
    );
  });

  it("a DATA_KEYS whose key under an id is not the one that wrote the data (a secret generated again) stops the start, naming the setting", async () => {
    await running?.stop();
    running = undefined;
    const regenerated = { ...settings, DATA_KEYS: newDataKeysEntry("k2") };
    const error = await startAuthService(regenerated, createLogger("auth", "silent")).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(SettingsError);
    expect((error as Error).message).toMatch(/^invalid setting DATA_KEYS: key k2 is not the key that wrote/);
  });
});
