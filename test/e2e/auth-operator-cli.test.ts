import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createLogger, type RunningService } from "@pi/common";
import { startWarmGateway } from "@pi/gateway";
import { as, startTestStack, type TestStack } from "../support/services.js";
import { accessToken, connectionRequestStatus, opsCliEnv, opsFor, requestToken, runOpsCli, type CliRun } from "../support/partner-api.js";
import { decodeJwt, NO_RATE_LIMITS, withAuthDb } from "../support/auth.js";

// The operator contract's partner and credential commands, run as an operator runs them: the
// compiled CLI (services/ops/dist/main.js, built by `npm test`) in its own process, against an
// in-process stack whose internal addresses it gets from the environment.

let stack: TestStack;
let second: RunningService;
let gateways: string[];
let elder: string;

beforeAll(async () => {
  stack = await startTestStack(NO_RATE_LIMITS);
  second = await startWarmGateway(as(stack.settings, "gateway"), createLogger("gateway-2", stack.settings.LOG_LEVEL));
  gateways = [stack.baseUrl, `http://127.0.0.1:${second.port}`];
  elder = (await opsFor(stack.settings).elderCreate()).address;
});
afterAll(async () => {
  await second?.stop();
  await stack?.stop();
});

type Run = CliRun;
const ops = (...args: string[]) => runOpsCli(opsCliEnv(stack.settings), args);

/** Exactly one JSON object on stdout and nothing else there; nothing on stderr; exit 0. */
function oneObject(run: Run): Record<string, unknown> {
  expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: "" });
  expect(run.stdout.endsWith("\n")).toBe(true);
  expect(run.stdout.trim().split("\n")).toHaveLength(1);
  const value = JSON.parse(run.stdout) as unknown;
  expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
  return value as Record<string, unknown>;
}

/** Non-zero exit, nothing on stdout, one line on stderr. */
function refused(run: Run): string {
  expect(run.code).not.toBe(0);
  expect(run.stdout).toBe("");
  expect(run.stderr.trim().split("\n")).toHaveLength(1);
  return run.stderr.trim();
}

const everyGateway = (token: string) => Promise.all(gateways.map((g) => connectionRequestStatus(g, token, elder)));

const credentialShape = { client_id: expect.stringMatching(/^cli_/), client_secret: expect.any(String) };

describe("operator CLI: partner create", () => {
  it("partner create --json prints exactly the operator contract's object, with working credentials", async () => {
    const out = oneObject(await ops("partner", "create", "--name", "CLI Pharmacy", "--json"));
    expect(out).toEqual({ partner_id: expect.stringMatching(/^ptr_/), live: credentialShape, test: credentialShape, signing_secret: expect.any(String) });
    expect(Object.keys(out)).toEqual(["partner_id", "live", "test", "signing_secret"]);
    const live = out.live as { client_id: string; client_secret: string };
    const test = out.test as { client_id: string; client_secret: string };
    expect(Object.keys(live)).toEqual(["client_id", "client_secret"]);
    expect(new Set([live.client_secret, test.client_secret, out.signing_secret]).size).toBe(3);
    const liveToken = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
    const testToken = await accessToken(stack.baseUrl, test.client_id, test.client_secret);
    expect(decodeJwt(liveToken).payload).toMatchObject({ sub: out.partner_id, mode: "live", scope: "connections:write files:write" });
    expect(decodeJwt(testToken).payload).toMatchObject({ sub: out.partner_id, mode: "test" });
  });

  it("--json may come before the command as well", async () => {
    const out = oneObject(await ops("--json", "partner", "create", "--name", "Early Flag Clinic"));
    expect(out.partner_id).toMatch(/^ptr_/);
  });

  it("--scopes restricts the partner's allowed scopes", async () => {
    const out = oneObject(await ops("partner", "create", "--name", "Files Only", "--scopes", "files:write", "--json"));
    const live = out.live as { client_id: string; client_secret: string };
    const res = await requestToken(stack.baseUrl, { grant_type: "client_credentials", ...live });
    expect(JSON.parse(res.text)).toMatchObject({ scope: "files:write" });
    const asked = await requestToken(stack.baseUrl, { grant_type: "client_credentials", ...live, scope: "connections:write" });
    expect(JSON.parse(asked.text)).toMatchObject({ error: "invalid_scope" });
    const both = oneObject(await ops("partner", "create", "--name", "Both", "--scopes", "connections:write files:write", "--json"));
    const bothLive = both.live as { client_id: string; client_secret: string };
    expect(JSON.parse((await requestToken(stack.baseUrl, { grant_type: "client_credentials", ...bothLive })).text)).toMatchObject({
      scope: "connections:write files:write",
    });
  });

  it.each([
    [["--scopes", "admin"]],
    [["--scopes", ""]],
    [["--webhook-url", "not a url"]],
  ])("partner create refuses %j with one line on stderr and nothing on stdout", async (extra) => {
    refused(await ops("partner", "create", "--name", "Bad", ...extra, "--json"));
  });

  it("partner create without --name is refused", async () => {
    refused(await ops("partner", "create", "--json"));
  });

  it("without --json it prints readable lines, not JSON", async () => {
    const run = await ops("partner", "create", "--name", "Human Readable");
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^partner_id: ptr_/m);
    expect(() => JSON.parse(run.stdout)).toThrow();
  });
});

describe("operator CLI: credential create and revoke", () => {
  it("credential create --mode test|live prints the contract's object; the credential works and carries its mode", async () => {
    const partner = oneObject(await ops("partner", "create", "--name", "Second Credential Lab", "--json"));
    for (const mode of ["test", "live"]) {
      const out = oneObject(await ops("credential", "create", partner.partner_id as string, "--mode", mode, "--json"));
      expect(out).toEqual({ ...credentialShape, mode });
      expect(Object.keys(out)).toEqual(["client_id", "client_secret", "mode"]);
      const token = await accessToken(stack.baseUrl, out.client_id as string, out.client_secret as string);
      expect(decodeJwt(token).payload).toMatchObject({ mode, sub: partner.partner_id });
    }
  });

  it("credential create refuses a bad mode or an unknown partner", async () => {
    const partner = oneObject(await ops("partner", "create", "--name", "Mode Lab", "--json"));
    expect(refused(await ops("credential", "create", partner.partner_id as string, "--mode", "staging", "--json"))).toMatch(/live or test/);
    refused(await ops("credential", "create", "ptr_doesnotexist", "--mode", "live", "--json"));
  });

  it("credential revoke: the effect is visible on every gateway by the time the CLI exits", async () => {
    const partner = oneObject(await ops("partner", "create", "--name", "Revoke Via CLI", "--json"));
    const live = partner.live as { client_id: string; client_secret: string };
    const token = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
    expect(await everyGateway(token)).toEqual([202, 202]);
    const out = oneObject(await ops("credential", "revoke", live.client_id, "--json"));
    expect(out).toEqual({ client_id: live.client_id, status: "revoked" });
    expect(await everyGateway(token)).toEqual([401, 401]);
    const again = await requestToken(gateways[1]!, { grant_type: "client_credentials", ...live });
    expect(JSON.parse(again.text)).toMatchObject({ error: "invalid_client" });
  });

  it("credential revoke: a gateway that does not confirm in time is named in a warning on stderr; stdout keeps its one object", async () => {
    const partner = oneObject(await ops("partner", "create", "--name", "Warned Clinic", "--json"));
    const live = partner.live as { client_id: string };
    await withAuthDb(stack.settings, (db) => db.collection("gateways").insertOne({ _id: "ghost-gateway", nextOffsets: { "0": 0 }, seenAt: new Date() } as never));
    try {
      const run = await ops("credential", "revoke", live.client_id, "--json");
      expect(run.code).toBe(0);
      expect(JSON.parse(run.stdout)).toEqual({ client_id: live.client_id, status: "revoked" });
      expect(run.stderr).toMatch(/^warning: 1 of 3 gateways had not confirmed the change after \d+ ms/);
    } finally {
      await withAuthDb(stack.settings, (db) => db.collection("gateways").deleteOne({ _id: "ghost-gateway" } as never));
    }
  });

  it("credential revoke of an unknown client is refused", async () => {
    expect(refused(await ops("credential", "revoke", "cli_doesnotexist", "--json"))).toMatch(/cli_doesnotexist/);
  });
});

describe("operator CLI: partner suspend and reinstate", () => {
  it("partner suspend / reinstate: visible on every gateway by the time the CLI exits, both ways; a token from before the suspension stays refused", async () => {
    const partner = oneObject(await ops("partner", "create", "--name", "Suspend Via CLI", "--json"));
    const live = partner.live as { client_id: string; client_secret: string };
    const token = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
    const id = partner.partner_id as string;
    expect(oneObject(await ops("partner", "suspend", id, "--json"))).toEqual({ partner_id: id, status: "suspended" });
    expect(await everyGateway(token)).toEqual([401, 401]);
    expect(JSON.parse((await requestToken(stack.baseUrl, { grant_type: "client_credentials", ...live })).text)).toMatchObject({ error: "invalid_client" });
    expect(oneObject(await ops("partner", "reinstate", id, "--json"))).toEqual({ partner_id: id, status: "active" });
    expect(await everyGateway(token)).toEqual([401, 401]);
    expect(await everyGateway(await accessToken(stack.baseUrl, live.client_id, live.client_secret))).toEqual([202, 202]);
  });

  it.each(["suspend", "reinstate"])("partner %s of an unknown partner is refused", async (act) => {
    refused(await ops("partner", act, "ptr_doesnotexist", "--json"));
  });

  it("the decoy partner behind guarantee 5 cannot be reinstated or given credentials", async () => {
    refused(await ops("partner", "reinstate", "ptr~decoy", "--json"));
    refused(await ops("credential", "create", "ptr~decoy", "--mode", "live", "--json"));
  });
});

describe("operator CLI: keys rotate", () => {
  it("keys rotate --json names the new key and when it starts signing", async () => {
    const out = oneObject(await ops("keys", "rotate", "--json"));
    expect(out).toEqual({ kid: expect.stringMatching(/^key_/), activates_at: expect.any(String), retired_kids: [] });
    expect(Date.parse(out.activates_at as string)).toBeGreaterThan(Date.now());
  });
});

// Last: it revokes the key that signed the tokens above.
describe("operator CLI: keys revoke", () => {
  it("keys revoke KID --json: the key's tokens are refused on every gateway when the CLI exits, and the replacement signs; an unknown key is refused", async () => {
    const partner = oneObject(await ops("partner", "create", "--name", "Key Revoke Via CLI", "--json"));
    const live = partner.live as { client_id: string; client_secret: string };
    const token = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
    const kid = decodeJwt(token).header.kid as string;
    expect(await everyGateway(token)).toEqual([202, 202]);
    const out = oneObject(await ops("keys", "revoke", kid, "--json"));
    expect(out).toEqual({ kid, status: "revoked", replacement_kid: expect.stringMatching(/^key_/) });
    expect(await everyGateway(token)).toEqual([401, 401]);
    const fresh = await accessToken(stack.baseUrl, live.client_id, live.client_secret);
    expect(decodeJwt(fresh).header.kid).toBe(out.replacement_kid);
    expect(await everyGateway(fresh)).toEqual([202, 202]);
    refused(await ops("keys", "revoke", "key_doesnotexist", "--json"));
  });
});
