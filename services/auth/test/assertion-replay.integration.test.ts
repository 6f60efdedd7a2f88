import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { authv1 } from "@pi/proto";
import { clientsFor, type AuthClient } from "@pi/common/clients";
import { createLogger } from "@pi/common/logger";
import { databaseName } from "@pi/common/mongo";
import type { RunningService } from "@pi/common/run-service";
import type { Settings } from "@pi/common/settings";
import { startAuthService } from "../src/service.js";
import { sweepUsedAssertions, type UsedAssertionDoc } from "../src/store.js";
import { commands } from "../../ops/src/commands.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";
import { partnerKey } from "../../../test/support/auth.js";

// A private_key_jwt assertion's jti is accepted once, across every auth replica: two replicas
// (each its own MongoClient) sharing one database, the same assertion sent to both at once many
// times over, exactly one token. Used jtis are swept once their assertion has expired.

const TOKEN_ENDPOINT = "https://partners.example/oauth/token";
let settings: Settings;
const replicas: RunningService[] = [];
let a: AuthClient;
let b: AuthClient;
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings({ TOKEN_ENDPOINT_URL: TOKEN_ENDPOINT });
  for (let i = 0; i < 2; i++) replicas.push(await startAuthService(settings, createLogger(`auth-${i}`, settings.LOG_LEVEL)));
  [a, b] = replicas.map((r) => clientsFor({ ...as(settings, "gateway"), AUTH_SERVICE_URL: `http://127.0.0.1:${r.port}` }).auth());
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
    const { client_id: clientId } = (await ops.credentialCreate(partner.partner_id, "live", { jwksJson: JSON.stringify(key.jwks) })) as { client_id: string };
    for (let round = 0; round < 5; round++) {
      const assertion = await key.assertion(clientId, TOKEN_ENDPOINT);
      const requests = Array.from({ length: 8 }, () => ({ clientId: "", clientSecret: "", clientAssertion: assertion }));
      // Within one batch and across the two replicas, all at once.
      const answers = await Promise.all([a.issueTokens({ requests }), b.issueTokens({ requests }), a.issueToken(requests[0]!), b.issueToken(requests[0]!)]);
      const issued = tokens(answers[0]) + tokens(answers[1]) + [answers[2], answers[3]].filter((r) => r.outcome.case === "token").length;
      expect({ round, issued }).toEqual({ round, issued: 1 });
    }
  });

  it("used jtis stay until their assertion's exp, then the sweep drops them (and every failure's decoy at once)", async () => {
    const used = mongo.db(databaseName(settings.DATA_NAMESPACE, "auth")).collection<UsedAssertionDoc>("used_assertions");
    const now = Date.now();
    await used.insertMany([
      { _id: "cli_x\u0000live", expiresAt: new Date(now + 120_000) },
      { _id: "cli_x\u0000gone", expiresAt: new Date(now - 1_000) },
      { _id: "~decoy:1", expiresAt: new Date(now - 1) },
    ]);
    await sweepUsedAssertions({ usedAssertions: used }, new Date(now));
    expect((await used.find({ _id: { $in: ["cli_x\u0000live", "cli_x\u0000gone", "~decoy:1"] } }).toArray()).map((d) => d._id)).toEqual(["cli_x\u0000live"]);
  });
});
