import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { authv1 } from "@pi/proto";
import { clientsFor, type AuthClient } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startAuthService } from "../src/service.js";
import { commands } from "../../ops/src/commands.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";

// The token endpoint's cache of successful authentications, on two auth replicas (each its own
// MongoClient and Kafka consumer) sharing one database: once `credential revoke` or `partner
// suspend` returns to the operator, the right secret gets invalid_client from every replica, the
// one that wrote the change and the other, though both had the authentication cached.

let settings: Settings;
const replicas: RunningService[] = [];
let a: AuthClient;
let b: AuthClient;
let mongo: MongoClient;

const urlOf = (r: RunningService) => `http://127.0.0.1:${r.port}`;
/** The operator commands, sent to one replica, or to both as the CLI does (`AUTH_ADMIN_URL` lists every replica). */
const opsVia = (...rs: RunningService[]) => {
  const c = clientsFor({ ...settings, ...addressOf("auth", ...rs) });
  return commands({ auth: c.authAdmin(), connection: c.connectionAdmin(), webhook: c.webhookAdmin() });
};

beforeAll(async () => {
  settings = testSettings();
  for (let i = 0; i < 2; i++)
    replicas.push(await startAuthService(settings, createLogger(`auth-${i}`, settings.LOG_LEVEL)));
  // Token requests come from the gateway; the operator's commands (opsVia, b's revocation) from the CLI.
  [a, b] = replicas.map((r) => clientsFor({ ...as(settings, "gateway"), AUTH_SERVICE_URL: urlOf(r) }).auth());
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "auth")).dropDatabase();
  await mongo?.close();
});

type Outcome = "token" | "invalid_client" | "invalid_scope";

async function outcome(client: AuthClient, clientId: string, clientSecret: string): Promise<Outcome> {
  const res = await client.issueToken({ clientId, clientSecret });
  if (res.outcome.case === "token") return "token";
  return res.outcome.value === authv1.TokenFailure.INVALID_SCOPE ? "invalid_scope" : "invalid_client";
}

/** Both replicas issue a token for the credential, twice each: the second is served from the cache. */
async function warm(clientId: string, clientSecret: string): Promise<void> {
  for (let i = 0; i < 2; i++)
    expect([await outcome(a, clientId, clientSecret), await outcome(b, clientId, clientSecret)]).toEqual([
      "token",
      "token",
    ]);
}

const everywhere = (clientId: string, clientSecret: string) =>
  Promise.all([outcome(a, clientId, clientSecret), outcome(b, clientId, clientSecret)]);
const credentials = () =>
  mongo.db(databaseName(settings.DATA_NAMESPACE, "auth")).collection<{ _id: string; status: string }>("credentials");

describe("the authentication cache on two auth replicas", () => {
  it("a warm replica serves the right secret without reading the credential (a change written without its event is not seen: every change must go through its event)", async () => {
    const p = await opsVia(replicas[0]!).partnerCreate({ name: "Cached Clinic" });
    await warm(p.live.client_id, p.live.client_secret);
    await credentials().updateOne({ _id: p.live.client_id }, { $set: { status: "revoked" } });
    expect(await everywhere(p.live.client_id, p.live.client_secret)).toEqual(["token", "token"]);
    // A wrong secret never finds the entry: it takes the full path and fails.
    expect(await everywhere(p.live.client_id, p.test.client_secret)).toEqual(["invalid_client", "invalid_client"]);
  });

  it("credential revoke: when the operator command returns, the right secret gets invalid_client from the replica that wrote it and from the other", async () => {
    const p = await opsVia(replicas[0]!).partnerCreate({ name: "Revoked Cached Pharmacy" });
    await warm(p.live.client_id, p.live.client_secret);
    await warm(p.test.client_id, p.test.client_secret);
    // Token requests keep coming on both replicas while the revocation runs: none may leave the
    // credential cached once the command has returned.
    let racing = true;
    const race = (async () => {
      while (racing) await everywhere(p.live.client_id, p.live.client_secret);
    })();
    try {
      expect(await opsVia(replicas[0]!).credentialRevoke(p.live.client_id)).toEqual({
        client_id: p.live.client_id,
        status: "revoked",
      });
      expect(await everywhere(p.live.client_id, p.live.client_secret)).toEqual(["invalid_client", "invalid_client"]);
    } finally {
      racing = false;
      await race;
    }
    expect(await everywhere(p.live.client_id, p.live.client_secret)).toEqual(["invalid_client", "invalid_client"]);
    // The partner's other credential is untouched, and still served.
    expect(await everywhere(p.test.client_id, p.test.client_secret)).toEqual(["token", "token"]);
  });

  it("partner suspend: every credential of the partner gets invalid_client from both replicas when the command returns; reinstate restores them", async () => {
    const p = await opsVia(replicas[0]!).partnerCreate({ name: "Suspended Cached Lab" });
    await warm(p.live.client_id, p.live.client_secret);
    await warm(p.test.client_id, p.test.client_secret);
    await opsVia(replicas[1]!).partnerSetStatus(p.partner_id, "suspended");
    expect([
      ...(await everywhere(p.live.client_id, p.live.client_secret)),
      ...(await everywhere(p.test.client_id, p.test.client_secret)),
    ]).toEqual(["invalid_client", "invalid_client", "invalid_client", "invalid_client"]);
    await opsVia(...replicas).partnerSetStatus(p.partner_id, "active");
    expect([
      ...(await everywhere(p.live.client_id, p.live.client_secret)),
      ...(await everywhere(p.test.client_id, p.test.client_secret)),
    ]).toEqual(["token", "token", "token", "token"]);
  });

  it("the operator's answer counts both auth replicas as confirmed", async () => {
    const p = await opsVia(replicas[0]!).partnerCreate({ name: "Counted Clinic" });
    const res = await clientsFor({ ...settings, ...addressOf("auth", replicas[1]!) })
      .authAdmin()
      .revokeCredential({ clientId: p.test.client_id });
    expect(res.propagation).toMatchObject({ authReplicas: 2, authConfirmed: 2 });
    expect(Number(res.propagation!.elapsedMs)).toBeLessThan(2000);
  });

  it("cache trust: a replica stuck applying a partner event (its heartbeat still reported) stops serving the revoked credential from its cache", async () => {
    let release!: () => void;
    let held: Promise<void> | undefined;
    const stuck = await startAuthService(settings, createLogger("auth-stuck", settings.LOG_LEVEL), {
      beforePartnerEvent: () => held ?? Promise.resolve(),
    });
    try {
      const c = clientsFor({ ...as(settings, "gateway"), AUTH_SERVICE_URL: urlOf(stuck) }).auth();
      const p = await opsVia(replicas[0]!).partnerCreate({ name: "Stuck Replica Clinic" });
      for (let i = 0; i < 2; i++) expect(await outcome(c, p.live.client_id, p.live.client_secret)).toBe("token");
      held = new Promise((resolve) => (release = resolve));
      // The stuck replica never confirms; the command answers after its timeout.
      const res = await clientsFor({ ...settings, ...addressOf("auth", replicas[0]!) })
        .authAdmin()
        .revokeCredential({ clientId: p.live.client_id });
      expect(res.propagation).toMatchObject({ authConfirmed: (res.propagation?.authReplicas ?? 0) - 1 });
      // It is applying an event, so its cache is not trusted: the request reads the database.
      const deadline = performance.now() + 2000;
      let seen = await outcome(c, p.live.client_id, p.live.client_secret);
      while (seen !== "invalid_client" && performance.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        seen = await outcome(c, p.live.client_id, p.live.client_secret);
      }
      expect(seen).toBe("invalid_client");
      // Done applying, it serves from its cache again (a direct write without an event is not seen).
      release();
      held = undefined;
      const q = await opsVia(replicas[0]!, stuck).partnerCreate({ name: "Unstuck Clinic" });
      await outcome(c, q.live.client_id, q.live.client_secret);
      await credentials().updateOne({ _id: q.live.client_id }, { $set: { status: "revoked" } });
      expect(await outcome(c, q.live.client_id, q.live.client_secret)).toBe("token");
    } finally {
      release?.();
      held = undefined;
      await stuck.stop();
    }
  });
});
