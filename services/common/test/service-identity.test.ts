import { generateKeyPairSync } from "node:crypto";
import { Writable } from "node:stream";
import { afterAll, describe, expect, it } from "@jest/globals";
import { RpcError, Status } from "../src/rpc/errors.js";
import { closeClient, serviceClient } from "../src/rpc/client.js";
import type { RpcServer } from "../src/rpc/server.js";
import { serveForTest, testIdentityKey } from "../../../test/support/local-client.js";
import { SignJWT } from "jose";
import { authv1, healthv1 } from "@pi/proto";
import { createLogger } from "../src/runtime/logger.js";
import {
  generateIdentity,
  IdentityError,
  keyId,
  minterFor,
  parseOwnIdentity,
  parsePublicKeys,
  publicKeyEntry,
  TokenMinter,
  TokenVerifier,
} from "../src/rpc/service-identity.js";
import { parseSettings } from "../src/runtime/settings.js";
import { WORKLOADS, type Workload } from "../src/rpc/allowed-callers.js";

// Service tokens: minted by the caller, verified by the service (services/common/src/rpc/service-identity.ts).

const ids = Object.fromEntries(WORKLOADS.map((n) => [n, generateIdentity(n)])) as Record<
  Workload,
  { key: string; publicKey: string }
>;
const publicKeys = parsePublicKeys(WORKLOADS.map((n) => ids[n].publicKey).join(","));
const T0 = Date.parse("2026-03-02T10:00:00Z");

function clock(start = T0) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}
const minter = (name: Workload, now: () => number = () => T0) => new TokenMinter(parseOwnIdentity(ids[name].key), now);

async function failure(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof IdentityError) return err.failure;
    throw err;
  }
  throw new Error("it was accepted");
}

/** Replaces one claim of a signed token's payload, keeping its header and signature. */
function withClaim(token: string, claim: string, value: unknown): string {
  const [h, p, s] = token.split(".");
  const payload = JSON.parse(Buffer.from(p!, "base64url").toString()) as Record<string, unknown>;
  payload[claim] = value;
  return `${h}.${Buffer.from(JSON.stringify(payload)).toString("base64url")}.${s}`;
}

describe("service tokens: mint and verify", () => {
  it("a token the gateway signed for auth proves the gateway to auth", async () => {
    const token = await minter("gateway").token("auth");
    expect(await new TokenVerifier("auth", publicKeys, () => T0).verify(token)).toBe("gateway");
  });

  it("the caller reuses its token for an audience until 20 s before it expires, then signs a new one", async () => {
    const c = clock();
    const m = minter("gateway", c.now);
    const first = await m.token("auth");
    expect(await m.token("auth")).toBe(first);
    expect(await m.token("connection")).not.toBe(first);
    c.advance(39_000);
    expect(await m.token("auth")).toBe(first);
    c.advance(1_000);
    const second = await m.token("auth");
    expect(second).not.toBe(first);
    expect(await new TokenVerifier("auth", publicKeys, c.now).verify(second)).toBe("gateway");
  });

  it("expired: refused once exp plus the 10 s clock tolerance has passed", async () => {
    const token = await minter("gateway").token("auth");
    expect(await new TokenVerifier("auth", publicKeys, () => T0 + 69_000).verify(token)).toBe("gateway");
    expect(await failure(new TokenVerifier("auth", publicKeys, () => T0 + 71_000).verify(token))).toBe("expired");
  });

  it("wrong audience: a token for the connection service is refused by auth", async () => {
    const token = await minter("gateway").token("connection");
    expect(await failure(new TokenVerifier("auth", publicKeys, () => T0).verify(token))).toBe("wrong_audience");
  });

  it("unknown issuer: a workload whose key the service does not know, or a name that is no workload", async () => {
    const onlyGateway = parsePublicKeys(ids.gateway.publicKey);
    const token = await minter("webhook").token("auth");
    expect(await failure(new TokenVerifier("auth", onlyGateway, () => T0).verify(token))).toBe("unknown_caller");
    const stranger = await new SignJWT({})
      .setProtectedHeader({ alg: "EdDSA", typ: "pi-service+jwt", kid: "x" })
      .setIssuer("mallory")
      .setAudience("auth")
      .setIssuedAt(T0 / 1000)
      .setExpirationTime(T0 / 1000 + 60)
      .sign(generateKeyPairSync("ed25519").privateKey);
    expect(await failure(new TokenVerifier("auth", publicKeys, () => T0).verify(stranger))).toBe("unknown_caller");
  });

  it("a key of its own claiming another workload's name: refused (the key is not that workload's)", async () => {
    const { privateKey, publicKey } = generateKeyPairSync("ed25519");
    const forged = await new SignJWT({})
      .setProtectedHeader({ alg: "EdDSA", typ: "pi-service+jwt", kid: keyId(publicKey) })
      .setIssuer("ops")
      .setAudience("auth")
      .setIssuedAt(T0 / 1000)
      .setExpirationTime(T0 / 1000 + 60)
      .sign(privateKey);
    expect(await failure(new TokenVerifier("auth", publicKeys, () => T0).verify(forged))).toBe("unknown_key");
    // ... and with the real ops key id in its header, the signature does not verify.
    const opsKid = parseOwnIdentity(ids.ops.key).kid;
    const withOpsKid = await new SignJWT({})
      .setProtectedHeader({ alg: "EdDSA", typ: "pi-service+jwt", kid: opsKid })
      .setIssuer("ops")
      .setAudience("auth")
      .setIssuedAt(T0 / 1000)
      .setExpirationTime(T0 / 1000 + 60)
      .sign(privateKey);
    expect(await failure(new TokenVerifier("auth", publicKeys, () => T0).verify(withOpsKid))).toBe("invalid");
  });

  it("tampered: a changed audience, expiry or issuer breaks the signature", async () => {
    const verifier = new TokenVerifier("auth", publicKeys, () => T0);
    const forConnection = await minter("gateway").token("connection");
    expect(await failure(verifier.verify(withClaim(forConnection, "aud", "auth")))).toBe("invalid");
    const forAuth = await minter("gateway").token("auth");
    expect(await failure(verifier.verify(withClaim(forAuth, "exp", T0 / 1000 + 3600)))).toBe("invalid");
    // The webhook's token made to say "ops": the kid is still the webhook's, so no ops key matches.
    const webhook = await minter("webhook").token("auth");
    expect(["unknown_key", "invalid"]).toContain(await failure(verifier.verify(withClaim(webhook, "iss", "ops"))));
    // One character of the signature changed.
    const sig = forAuth.slice(-3);
    const flipped = `${forAuth.slice(0, -3)}${sig[0] === "A" ? "B" : "A"}${sig.slice(1)}`;
    expect(await failure(verifier.verify(flipped))).toBe("invalid");
  });

  it("a token valid for longer than the 60 s callers use is refused past 60 s, whatever its exp says", async () => {
    const own = parseOwnIdentity(ids.gateway.key);
    const long = await new SignJWT({})
      .setProtectedHeader({ alg: "EdDSA", typ: "pi-service+jwt", kid: own.kid })
      .setIssuer("gateway")
      .setAudience("auth")
      .setIssuedAt(T0 / 1000)
      .setExpirationTime(T0 / 1000 + 86_400)
      .sign(own.privateKey);
    expect(await new TokenVerifier("auth", publicKeys, () => T0).verify(long)).toBe("gateway");
    expect(await failure(new TokenVerifier("auth", publicKeys, () => T0 + 120_000).verify(long))).toBe("expired");
  });

  it("no token, garbage, another kind of JWT (a partner's access token shape) or another algorithm: refused", async () => {
    const verifier = new TokenVerifier("auth", publicKeys, () => T0);
    expect(await failure(verifier.verify(undefined))).toBe("missing");
    expect(await failure(verifier.verify(""))).toBe("missing");
    expect(await failure(verifier.verify("not.a.token"))).toBe("malformed");
    expect(await failure(verifier.verify("Bearer abc"))).toBe("malformed");
    const own = parseOwnIdentity(ids.gateway.key);
    const untyped = await new SignJWT({ scope: "files:write" })
      .setProtectedHeader({ alg: "EdDSA", kid: own.kid })
      .setIssuer("gateway")
      .setAudience("auth")
      .setIssuedAt(T0 / 1000)
      .setExpirationTime(T0 / 1000 + 60)
      .sign(own.privateKey);
    expect(await failure(verifier.verify(untyped))).toBe("invalid");
    const hs = await new SignJWT({})
      .setProtectedHeader({ alg: "HS256", typ: "pi-service+jwt", kid: own.kid })
      .setIssuer("gateway")
      .setAudience("auth")
      .setIssuedAt(T0 / 1000)
      .setExpirationTime(T0 / 1000 + 60)
      .sign(new TextEncoder().encode("a shared secret of thirty-two bytes!"));
    expect(await failure(verifier.verify(hs))).toBe("invalid");
  });

  it("a verified token is remembered until it expires: the same token again costs no verification", async () => {
    let lookups = 0;
    const counting = new Map(publicKeys);
    const get = counting.get.bind(counting);
    counting.get = (name) => {
      lookups++;
      return get(name);
    };
    const c = clock();
    const verifier = new TokenVerifier("auth", counting, c.now);
    const token = await minter("gateway").token("auth");
    for (let i = 0; i < 5; i++) expect(await verifier.verify(token)).toBe("gateway");
    expect(lookups).toBe(1);
    c.advance(71_000);
    expect(await failure(verifier.verify(token))).toBe("expired");
  });

  it("the remembered tokens are bounded", async () => {
    const c = clock();
    const verifier = new TokenVerifier("auth", publicKeys, c.now, 3);
    for (let i = 0; i < 10; i++) {
      c.advance(1_000);
      expect(await verifier.verify(await minter("gateway", c.now).token("auth"))).toBe("gateway");
    }
    expect((verifier as unknown as { verified: Map<string, unknown> }).verified.size).toBe(3);
  });

  it("a name may have several public keys (a key rotation): tokens of either verify", async () => {
    const next = generateIdentity("gateway");
    const keys = parsePublicKeys([ids.gateway.publicKey, next.publicKey, ids.ops.publicKey].join(","));
    const verifier = new TokenVerifier("auth", keys, () => T0);
    expect(await verifier.verify(await minter("gateway").token("auth"))).toBe("gateway");
    expect(await verifier.verify(await new TokenMinter(parseOwnIdentity(next.key), () => T0).token("auth"))).toBe(
      "gateway",
    );
  });
});

describe("SERVICE_IDENTITY_KEY and SERVICE_IDENTITY_PUBLIC_KEYS", () => {
  const pem = (name: Workload) =>
    parseOwnIdentity(ids[name].key).publicKey.export({ type: "spki", format: "pem" }).toString();

  it("the private key as name:base64 DER or name:PEM; its public entry derived from it", () => {
    const own = parseOwnIdentity(ids.webhook.key);
    expect(own.name).toBe("webhook");
    const asPem = `webhook:${own.privateKey.export({ type: "pkcs8", format: "pem" }).toString()}`;
    expect(parseOwnIdentity(asPem).kid).toBe(own.kid);
    expect(publicKeyEntry(ids.webhook.key)).toBe(ids.webhook.publicKey);
  });

  it("public keys as a name:base64 list or a JSON object of PEMs (one or a list per name)", () => {
    const fromJson = parsePublicKeys(JSON.stringify({ gateway: pem("gateway"), ops: [pem("ops")] }));
    expect([...fromJson.keys()]).toEqual(["gateway", "ops"]);
    expect([...fromJson.get("gateway")!.keys()]).toEqual([parseOwnIdentity(ids.gateway.key).kid]);
    expect([...parsePublicKeys(`${ids.auth.publicKey}, ${ids.ops.publicKey}`).keys()]).toEqual(["auth", "ops"]);
  });

  it("refuses, in one line without the value: an unknown name, a bad key, another key type, no key", () => {
    const rsa = generateKeyPairSync("rsa", { modulusLength: 1024 });
    const bad = {
      SERVICE_IDENTITY_KEY: [
        "mallory:AAAA",
        "auth",
        "auth:bm90IGEga2V5",
        `auth:${rsa.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64")}`,
        ids.auth.publicKey,
      ],
      SERVICE_IDENTITY_PUBLIC_KEYS: [
        "{}",
        "{not json",
        '{"mallory": "x"}',
        "auth:bm90IGEga2V5",
        `gateway:${rsa.publicKey.export({ type: "spki", format: "der" }).toString("base64")}`,
        `${ids.auth.publicKey},`,
      ],
    };
    for (const [name, values] of Object.entries(bad)) {
      for (const value of values) {
        let message = "";
        try {
          parseSettings({ [name]: value });
        } catch (err) {
          message = (err as Error).message;
        }
        expect(message).toMatch(new RegExp(`^invalid setting ${name}: `));
        expect(message).not.toContain("\n");
        if (value.length > 12)
          expect(message).not.toContain(value.slice(value.indexOf(":") + 1, value.indexOf(":") + 12));
      }
    }
    expect(
      parseSettings({ SERVICE_IDENTITY_KEY: ids.auth.key, SERVICE_IDENTITY_PUBLIC_KEYS: ids.auth.publicKey })
        .SERVICE_IDENTITY_KEY,
    ).toBe(ids.auth.key);
  });
});

describe("the server's identity and allow-list checks", () => {
  function logs() {
    const lines: Record<string, unknown>[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const line of chunk.toString().split("\n").filter(Boolean))
          lines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    return { lines, logger: createLogger("auth", "warn", destination) };
  }

  const servers: RpcServer[] = [];
  const clients: object[] = [];
  afterAll(async () => {
    for (const c of clients) closeClient(c);
    await Promise.all(servers.map((s) => s.close()));
  });

  /** The auth service's real server (identity and allow-list checks) on loopback, and its clients as `caller`. */
  async function authAs(caller: Workload | undefined, logger = logs().logger) {
    const server = await serveForTest(
      "auth",
      (router) => {
        router.service(authv1.AuthService, {
          createPartner: async () => ({ partnerId: "ptr_1" }),
          getWebhookTarget: async () => ({ found: false }),
          issueToken: async () => ({}),
        });
      },
      { logger, adminPort: 0 },
    );
    servers.push(server);
    const url = `http://127.0.0.1:${server.port}`;
    const key = caller && testIdentityKey(caller);
    const admin = serviceClient(authv1.AuthService, `http://127.0.0.1:${server.adminPort}`, key);
    const data = serviceClient(authv1.AuthService, url, key);
    const health = serviceClient(healthv1.Health, url);
    clients.push(admin, data, health);
    return {
      auth: { ...data, createPartner: admin.createPartner, getWebhookTarget: admin.getWebhookTarget },
      health,
    };
  }

  const code = async (p: Promise<unknown>) => {
    try {
      await p;
      return "ok";
    } catch (err) {
      return Status[RpcError.from(err).code];
    }
  };

  it("no token: Unauthenticated, logged with no caller; health checks stay open", async () => {
    const { lines, logger } = logs();
    const { auth, health } = await authAs(undefined, logger);
    expect(await code(auth.createPartner({ name: "x" }))).toBe("UNAUTHENTICATED");
    expect(await code(health.check({}))).toBe("ok");
    expect(lines).toEqual([
      expect.objectContaining({
        level: "warn",
        method: "pi.auth.v1.AuthService/CreatePartner",
        caller: null,
        reason: "missing",
      }),
    ]);
  });

  it("the gateway on CreatePartner: PermissionDenied, logged with the caller and never the token", async () => {
    const { lines, logger } = logs();
    const { auth } = await authAs("gateway", logger);
    expect(await code(auth.createPartner({ name: "x" }))).toBe("PERMISSION_DENIED");
    expect(await code(auth.issueToken({}))).toBe("ok");
    expect(lines).toEqual([
      expect.objectContaining({
        level: "warn",
        method: "pi.auth.v1.AuthService/CreatePartner",
        caller: "gateway",
        reason: "not_allowed",
      }),
    ]);
    const token = await minterFor(testIdentityKey("gateway")).token("auth");
    expect(JSON.stringify(lines)).not.toContain(token.split(".")[2]);
  });

  it("the logger censors a service token header and a private key, should either ever reach a log line", async () => {
    const { lines, logger } = logs();
    const token = await minter("gateway", Date.now).token("auth");
    logger.warn(
      {
        "pi-service-token": token,
        req: { headers: { "pi-service-token": token } },
        settings: { SERVICE_IDENTITY_KEY: ids.gateway.key },
      },
      "careless",
    );
    expect(JSON.stringify(lines)).not.toContain(token);
    expect(JSON.stringify(lines)).not.toContain(ids.gateway.key.slice(8, 40));
  });

  it("the webhook: GetWebhookTarget yes, CreatePartner no; the operator CLI: CreatePartner yes", async () => {
    const webhook = (await authAs("webhook")).auth;
    expect(await code(webhook.getWebhookTarget({ partnerId: "ptr_1" }))).toBe("ok");
    expect(await code(webhook.createPartner({ name: "x" }))).toBe("PERMISSION_DENIED");
    const ops = (await authAs("ops")).auth;
    expect(await code(ops.createPartner({ name: "x" }))).toBe("ok");
    expect(await code(ops.getWebhookTarget({ partnerId: "ptr_1" }))).toBe("PERMISSION_DENIED");
  });
});
