import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { clientsFor, createLogger, type RunningService } from "@pi/common";
import { startAuthService } from "@pi/auth";
import { as, startTestStack, type TestStack } from "../support/services.js";
import { accessToken, opsFor } from "../support/partner-api.js";
import { decodeJwt, NO_RATE_LIMITS } from "../support/auth.js";

// Key rotation without downtime (docs/authentication.md, "Key rotation"): the new key is published
// at once and signs only after every auth replica and gateway has reloaded the key set (here
// JWKS_REFRESH_SECONDS=1, so after 2 s); tokens signed with the old key keep verifying. An emergency
// revocation (`keys revoke`) takes effect on every replica when the command returns.

let stack: TestStack;
let replica: RunningService;
let partner: Awaited<ReturnType<ReturnType<typeof opsFor>["partnerCreate"]>>;
let elder: string;

beforeAll(async () => {
  stack = await startTestStack({ ...NO_RATE_LIMITS, JWKS_REFRESH_SECONDS: "1" });
  // A second auth replica on the same database, as a deployment with two auth pods has.
  replica = await startAuthService(as(stack.settings, "auth"), createLogger("auth-2", stack.settings.LOG_LEVEL));
  const ops = opsFor(stack.settings);
  partner = await ops.partnerCreate({ name: "Rotation Clinic" });
  elder = (await ops.elderCreate()).address;
});
afterAll(async () => {
  await replica?.stop();
  await stack?.stop();
});

async function use(token: string): Promise<number> {
  const res = await fetch(`${stack.baseUrl}/v1/connections`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ elder }),
  });
  await res.arrayBuffer();
  return res.status;
}

const kidOf = (token: string) => decodeJwt(token).header.kid as string;

describe("key rotation without downtime", () => {
  it("key rotation: no request fails while a new key is rotated in; the new key signs on every replica after the activation delay; old tokens keep working", async () => {
    const replicaAuth = clientsFor({ ...as(stack.settings, "gateway"), AUTH_SERVICE_URL: `http://127.0.0.1:${replica.port}` }).auth();
    const fromReplica = async () => {
      const res = await replicaAuth.issueToken({ clientId: partner.live.client_id, clientSecret: partner.live.client_secret });
      if (res.outcome.case !== "token") throw new Error("no token from the replica");
      return res.outcome.value.accessToken;
    };
    const oldToken = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const oldKid = kidOf(oldToken);
    expect(kidOf(await fromReplica())).toBe(oldKid);

    const failures: string[] = [];
    const kidsSeen = new Set<string>();
    let running = true;
    const traffic = (async () => {
      while (running) {
        const fresh = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret).catch((e: Error) => {
          failures.push(`token: ${e.message}`);
          return undefined;
        });
        const viaReplica = await fromReplica();
        for (const t of [fresh, viaReplica, oldToken]) {
          if (!t) continue;
          kidsSeen.add(kidOf(t));
          const status = await use(t);
          if (status !== 202) failures.push(`${status} for a token of ${kidOf(t)}`);
        }
        await new Promise((r) => setTimeout(r, 25));
      }
    })();

    const rotated = await opsFor(stack.settings).keysRotate();
    expect(rotated.kid).not.toBe(oldKid);
    const activatesAt = Date.parse(rotated.activates_at);
    expect(activatesAt - Date.now()).toBeGreaterThan(1000);
    // Before activation both replicas still sign with the old key.
    expect(kidOf(await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret))).toBe(oldKid);

    await new Promise((r) => setTimeout(r, activatesAt - Date.now() + 1500));
    running = false;
    await traffic;

    expect(failures).toEqual([]);
    expect(kidOf(await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret))).toBe(rotated.kid);
    expect(kidOf(await fromReplica())).toBe(rotated.kid);
    expect([...kidsSeen].sort()).toEqual([oldKid, rotated.kid].sort());
    expect(await use(oldToken)).toBe(202);
  });

  it("emergency key revocation (`ops keys revoke`): when the command returns, both auth replicas sign with the replacement key and the gateway refuses the revoked key's tokens, not at the next rotation", async () => {
    const replicaAuth = clientsFor({ ...as(stack.settings, "gateway"), AUTH_SERVICE_URL: `http://127.0.0.1:${replica.port}` }).auth();
    const fromReplica = async () => {
      const res = await replicaAuth.issueToken({ clientId: partner.live.client_id, clientSecret: partner.live.client_secret });
      if (res.outcome.case !== "token") throw new Error("no token from the replica");
      return res.outcome.value.accessToken;
    };
    const viaGateway = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    const viaReplica = await fromReplica();
    const kid = kidOf(viaGateway);
    expect(kidOf(viaReplica)).toBe(kid);
    expect([await use(viaGateway), await use(viaReplica)]).toEqual([202, 202]);

    const revoked = await opsFor(stack.settings).keysRevoke(kid);
    expect(revoked).toMatchObject({ kid, status: "revoked" });
    const replacement = revoked.replacement_kid!;
    expect(replacement).toMatch(/^key_/);
    expect([await use(viaGateway), await use(viaReplica)]).toEqual([401, 401]);
    const [fresh, freshFromReplica] = [await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret), await fromReplica()];
    expect([kidOf(fresh), kidOf(freshFromReplica)]).toEqual([replacement, replacement]);
    expect([await use(fresh), await use(freshFromReplica)]).toEqual([202, 202]);
    // The key is gone from the published set, and the act is on the audit trail.
    const jwks = JSON.parse((await replicaAuth.getJwks({})).jwksJson) as { keys: { kid: string }[] };
    expect(jwks.keys.map((k) => k.kid)).not.toContain(kid);
    expect(jwks.keys.map((k) => k.kid)).toContain(replacement);
  });
});
