import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { MongoClient } from "mongodb";
import type { authv1 } from "@pi/proto";
import { clientsFor, type AuthClient } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startAuthService } from "../src/service.js";
import { sweepUsedAssertions, type UsedAssertionDoc } from "../src/store.js";
import { commands } from "../../ops/src/commands.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";
import { partnerKey } from "../../../test/support/auth.js";

// A private_key_jwt assertion's jti is accepted once, across every auth replica: two replicas
// (each its own MongoClient) sharing one database, the same assertion sent to both at once many
// times over, exactly one token. Used jtis are swept once their assertion has expired. A JWK Set
// URL's set is stored with the credential: whichever replica fetched it, every replica verifies
// with it.

const TOKEN_ENDPOINT = "https://partners.example/oauth/token";
let settings: Settings;
const replicas: RunningService[] = [];
let a: AuthClient;
let b: AuthClient;
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings({ TOKEN_ENDPOINT_URL: TOKEN_ENDPOINT });
  // A JWK Set URL may be fetched again a second after the last fetch (30 s by default).
  for (let i = 0; i < 2; i++)
    replicas.push(
      await startAuthService(settings, createLogger(`auth-${i}`, settings.LOG_LEVEL), {
        jwksUrlRefetchCooldownMs: 1_000,
      }),
    );
  [a, b] = replicas.map((r) =>
    clientsFor({ ...as(settings, "gateway"), AUTH_SERVICE_URL: `http://127.0.0.1:${r.port}` }).auth(),
  );
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.stop()));
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "auth")).dropDatabase();
  await mongo?.close();
});

const tokens = (res: authv1.IssueTokensResponse) => res.responses.filter((r) => r.outcome.case === "token").length;

describe("jti replay across two auth replicas", () => {
  it("the same assertion sent to both replicas at once, eight times each, gets exactly one token; a fresh jti gets the next", async () => {
    const c = clientsFor({ ...settings, ...addressOf("auth", replicas[0]!) });
    const ops = commands({ auth: c.authAdmin(), connection: c.connectionAdmin(), webhook: c.webhookAdmin() });
    const partner = await ops.partnerCreate({ name: "Replayed Lab" });
    const key = await partnerKey("ES384", "k1");
    const { client_id: clientId } = (await ops.credentialCreate(partner.partner_id, "live", {
      jwksJson: JSON.stringify(key.jwks),
    })) as { client_id: string };
    for (let round = 0; round < 5; round++) {
      const assertion = await key.assertion(clientId, TOKEN_ENDPOINT);
      const requests = Array.from({ length: 8 }, () => ({
        clientId: "",
        clientSecret: "",
        clientAssertion: assertion,
      }));
      // Within one batch and across the two replicas, all at once.
      const answers = await Promise.all([
        a.issueTokens({ requests }),
        b.issueTokens({ requests }),
        a.issueToken(requests[0]!),
        b.issueToken(requests[0]!),
      ]);
      const issued =
        tokens(answers[0]) +
        tokens(answers[1]) +
        [answers[2], answers[3]].filter((r) => r.outcome.case === "token").length;
      expect({ round, issued }).toEqual({ round, issued: 1 });
    }
  });

  it("used jtis stay until their assertion's exp, then the sweep drops them (and every failure's decoy at once)", async () => {
    const used = mongo
      .db(databaseName(settings.DATA_NAMESPACE, "auth"))
      .collection<UsedAssertionDoc>("used_assertions");
    const now = Date.now();
    await used.insertMany([
      { _id: "cli_x\u0000live", expiresAt: new Date(now + 120_000) },
      { _id: "cli_x\u0000gone", expiresAt: new Date(now - 1_000) },
      { _id: "~decoy:1", expiresAt: new Date(now - 1) },
    ]);
    await sweepUsedAssertions({ usedAssertions: used }, new Date(now));
    expect(
      (await used.find({ _id: { $in: ["cli_x\u0000live", "cli_x\u0000gone", "~decoy:1"] } }).toArray()).map(
        (d) => d._id,
      ),
    ).toEqual(["cli_x\u0000live"]);
  });
});

describe("a JWK Set URL across two auth replicas", () => {
  it("the set fetched at registration through one replica verifies on the other at once; a new kid asked of one is fetched in the background, and then verifies on both", async () => {
    const first = await partnerKey("ES384", "k1");
    const second = await partnerKey("RS384", "k2");
    let published: object = first.jwks;
    let asked = 0;
    const host = createServer((_req, res) => {
      asked++;
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(published));
    });
    await new Promise<void>((r) => host.listen(0, "127.0.0.1", r));
    try {
      const url = `http://127.0.0.1:${(host.address() as AddressInfo).port}/jwks.json`;
      const c = clientsFor({ ...settings, ...addressOf("auth", replicas[0]!) });
      const ops = commands({ auth: c.authAdmin(), connection: c.connectionAdmin(), webhook: c.webhookAdmin() });
      const partner = await ops.partnerCreate({ name: "Published Keys Across Replicas" });
      const { client_id: clientId } = (await ops.credentialCreate(partner.partner_id, "live", { jwksUrl: url })) as {
        client_id: string;
      };
      expect(asked).toBe(1);
      const ask = async (replica: AuthClient, key: typeof first) =>
        (
          await replica.issueToken({
            clientId: "",
            clientSecret: "",
            clientAssertion: await key.assertion(clientId, TOKEN_ENDPOINT),
          })
        ).outcome.case;
      // Registered through replica 0: replica 1 (b) verifies with the stored set, fetching nothing.
      expect(await ask(b, first)).toBe("token");
      expect(await ask(a, first)).toBe("token");
      expect(asked).toBe(1);
      // The partner publishes a second key and signs with it: asked of b, refused while b fetches
      // in the background; then both verify (with the set a fetch stored, whichever replica made it).
      published = { keys: [...first.jwks.keys, ...second.jwks.keys] };
      expect(await ask(b, second)).not.toBe("token");
      for (const deadline = Date.now() + 20_000; (await ask(a, second)) !== "token"; ) {
        if (Date.now() > deadline)
          throw new Error(`the new kid never verified on the other replica (the host was asked ${asked} times)`);
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(await ask(b, second)).toBe("token");
      expect(await ask(a, first)).toBe("token");
    } finally {
      host.closeAllConnections();
      await new Promise((r) => host.close(r));
    }
  });
});
