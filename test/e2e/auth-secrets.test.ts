import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createHmac } from "node:crypto";
import { Writable } from "node:stream";
import { AUDIT_BOOKKEEPING, emptyOutbox } from "@pi/common";
import { startTestStack, type TestStack } from "../support/services.js";
import { accessToken, opsFor, requestToken } from "../support/partner-api.js";
import { NO_RATE_LIMITS, withAuthDb } from "../support/auth.js";

// Operator contract: "A secret is shown once, at creation, and stored only hashed." Secrets never
// reach a log line, at any level.

const logLines: string[] = [];
let stack: TestStack;
let ops: ReturnType<typeof opsFor>;

beforeAll(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines.push(...chunk.toString().split("\n").filter(Boolean));
      done();
    },
  });
  stack = await startTestStack({ ...NO_RATE_LIMITS, LOG_LEVEL: "trace" }, { logDestination: sink });
  ops = opsFor(stack.settings);
});
afterAll(async () => {
  await stack?.stop();
});

describe("secrets never logged", () => {
  it("secrets never logged: partner create, token requests (good and bad), bearer calls, revocation; at trace level", async () => {
    const before = logLines.length;
    const partner = await ops.partnerCreate({ name: "Logged Clinic", webhookUrl: "http://127.0.0.1:9/hook" });
    const extra = await ops.credentialCreate(partner.partner_id, "test");
    const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
    await requestToken(stack.baseUrl, { grant_type: "client_credentials", client_id: partner.live.client_id, client_secret: partner.live.client_secret }, "json");
    await requestToken(stack.baseUrl, { grant_type: "client_credentials", client_id: partner.test.client_id, client_secret: `${partner.test.client_secret}x` });
    await requestToken(stack.baseUrl, { grant_type: "client_credentials", client_id: "cli_unknown", client_secret: extra.client_secret });
    const elder = (await ops.elderCreate()).address;
    for (const auth of [`Bearer ${token}`, `Bearer ${token}x`]) {
      await fetch(`${stack.baseUrl}/v1/connections`, {
        method: "POST",
        headers: { authorization: auth, "content-type": "application/json" },
        body: JSON.stringify({ elder }),
      });
    }
    await ops.credentialRevoke(partner.live.client_id);
    // The last act's line (written once every gateway confirmed the revocation) closes the capture.
    for (const deadline = Date.now() + 10_000; !logLines.some((l) => l.includes("credential revoked") && l.includes(partner.live.client_id)) && Date.now() < deadline; ) {
      await new Promise((r) => setTimeout(r, 20));
    }

    const lines = logLines.slice(before);
    // The capture works: the gateway's access log lines of these requests are there.
    expect(lines.some((l) => l.includes('"path":"/oauth/token"'))).toBe(true);
    expect(lines.some((l) => l.includes("partner created"))).toBe(true);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();

    const secrets = {
      "live client secret": partner.live.client_secret,
      "test client secret": partner.test.client_secret,
      "created credential's secret": extra.client_secret,
      "signing secret": partner.signing_secret,
      "access token": token,
      "access token signature": token.split(".")[2]!,
      "live secret's random part": partner.live.client_secret.replace(/^sk_live_/, ""),
    };
    for (const [what, secret] of Object.entries(secrets)) {
      const leaking = lines.filter((l) => l.includes(secret));
      expect({ what, leaking }).toEqual({ what, leaking: [] });
    }
  });
});

describe("client secrets stored only hashed", () => {
  it("client secrets stored only hashed: the auth database holds the peppered HMAC, and no secret in any form", async () => {
    const partner = await ops.partnerCreate({ name: "Stored Clinic" });
    const extra = await ops.credentialCreate(partner.partner_id, "live");
    const dump = await withAuthDb(stack.settings, async (db) => {
      const out: Record<string, unknown[]> = {};
      for (const c of await db.listCollections().toArray()) out[c.name] = await db.collection(c.name).find().toArray();
      return out;
    });
    const credentials = dump.credentials as { _id: string; secretHash: string }[];
    const pepper = stack.settings.CREDENTIAL_PEPPER!;
    for (const [clientId, secret] of [
      [partner.live.client_id, partner.live.client_secret],
      [partner.test.client_id, partner.test.client_secret],
      [extra.client_id, extra.client_secret],
    ] as const) {
      const doc = credentials.find((c) => c._id === clientId)!;
      expect(doc.secretHash).toBe(createHmac("sha256", pepper).update(secret).digest("hex"));
      // Besides its own fields, a credential carries only the bookkeeping of its outboxes: events
      // (services/common/src/persistence.ts) and audit records (audit-trail.ts).
      const outboxFields: string[] = [...Object.keys(emptyOutbox()), ...AUDIT_BOOKKEEPING];
      expect(Object.keys(doc).filter((k) => !outboxFields.includes(k)).sort()).toEqual(["_id", "createdAt", "mode", "partnerId", "pepperId", "secretHash", "status"]);
      // The id of the pepper that made the hash, so a new pepper can be introduced later.
      expect((doc as { pepperId?: string }).pepperId).toBe("p1");
    }
    const everything = JSON.stringify(dump);
    for (const secret of [partner.live.client_secret, partner.test.client_secret, extra.client_secret, partner.signing_secret]) {
      expect(everything.includes(secret)).toBe(false);
      // The random part alone, without its prefix (sk_live_, sk_test_, whsec_); it may contain "_" itself.
      expect(everything.includes(secret.replace(/^(sk_live|sk_test|whsec)_/, ""))).toBe(false);
    }
    // The signing secret must be usable later (webhook signatures), so it is sealed, not hashed:
    // encrypted under its own data key, wrapped by the KEK k1 of DATA_KEYS, which the database does
    // not hold; the pepper keys hashes only.
    const stored = (dump.partners as { _id: string; sealedSigningSecret: string }[]).find((p) => p._id === partner.partner_id)!;
    expect(stored.sealedSigningSecret).toMatch(/^v2\.k1\./);
    expect(everything.includes(pepper)).toBe(false);
    for (const kek of stack.settings.DATA_KEYS!.split(",")) expect(everything.includes(kek.split(":")[1]!)).toBe(false);
  });
});
