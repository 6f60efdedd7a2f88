import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { decodeJwt } from "jose";
import { authv1 } from "@pi/proto";
import { clientsFor, MAX_REQUESTS_PER_BATCH, type AuthClient } from "@pi/common/rpc/clients";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startAuthService } from "../src/service.js";
import { commands } from "../../ops/src/commands.js";
import { as, testSettings } from "../../../test/support/services.js";

// IssueTokens, the batched IssueToken the gateway calls (proto/pi/auth/v1/auth.proto): each request
// of a call is answered as IssueToken answers it alone, in the order of the requests.

let settings: Settings;
let service: RunningService;
let auth: AuthClient;
let ops: ReturnType<typeof commands>;
let mongo: MongoClient;

beforeAll(async () => {
  settings = testSettings();
  service = await startAuthService(settings, createLogger("auth", settings.LOG_LEVEL));
  auth = clientsFor({ ...as(settings, "gateway"), AUTH_SERVICE_URL: `http://127.0.0.1:${service.port}` }).auth();
  const admin = clientsFor({ ...as(settings, "ops"), AUTH_ADMIN_URL: `http://127.0.0.1:${service.adminPort}` });
  ops = commands({ auth: admin.authAdmin(), connection: admin.connectionAdmin(), webhook: admin.webhookAdmin() });
  mongo = await MongoClient.connect(settings.MONGODB_URI);
});

afterAll(async () => {
  await service?.stop();
  await mongo?.db(databaseName(settings.DATA_NAMESPACE, "auth")).dropDatabase();
  await mongo?.close();
});

/** What an answer says, with a token's subject and scope to tell whose it is. */
function outcomeOf(res: authv1.IssueTokenResponse) {
  if (res.outcome.case === "token") {
    const claims = decodeJwt(res.outcome.value.accessToken);
    return { token: { sub: claims.sub, client_id: claims.client_id, scope: res.outcome.value.scope } };
  }
  return { failure: authv1.TokenFailure[res.outcome.value!] };
}

describe("IssueTokens", () => {
  it("answers every request as IssueToken answers it alone, in the order of the requests", async () => {
    const a = await ops.partnerCreate({ name: "Batched Pharmacy" });
    const b = await ops.partnerCreate({ name: "Batched Lab" });
    const requests = [
      { clientId: a.live.client_id, clientSecret: a.live.client_secret },
      { clientId: "cli_unknown", clientSecret: "sk_live_unknown" },
      { clientId: b.test.client_id, clientSecret: b.test.client_secret, scope: "files:write" },
      { clientId: a.live.client_id, clientSecret: b.live.client_secret },
      { clientId: b.live.client_id, clientSecret: b.live.client_secret, scope: "files:read" },
    ];
    const batched = (await auth.issueTokens({ requests })).responses.map(outcomeOf);
    const alone = await Promise.all(requests.map(async (r) => outcomeOf(await auth.issueToken(r))));
    expect(batched).toEqual(alone);
    expect(batched).toEqual([
      { token: { sub: a.partner_id, client_id: a.live.client_id, scope: "connections:write files:write" } },
      { failure: "INVALID_CLIENT" },
      { token: { sub: b.partner_id, client_id: b.test.client_id, scope: "files:write" } },
      { failure: "INVALID_CLIENT" },
      { failure: "INVALID_SCOPE" },
    ]);
  });

  it("an empty call gets no answers; a call with more requests than MAX_REQUESTS_PER_BATCH is refused whole", async () => {
    expect((await auth.issueTokens({ requests: [] })).responses).toEqual([]);
    const tooMany = Array.from({ length: MAX_REQUESTS_PER_BATCH + 1 }, (_, i) => ({
      clientId: `cli_${i}`,
      clientSecret: "sk_live_x",
    }));
    await expect(auth.issueTokens({ requests: tooMany })).rejects.toMatchObject({ code: 3 }); // InvalidArgument
  });
});
