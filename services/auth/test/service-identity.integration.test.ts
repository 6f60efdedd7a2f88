import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { Writable } from "node:stream";
import { RpcError, Status } from "@pi/common/rpc/errors";
import { MongoClient } from "mongodb";
import { authv1 } from "@pi/proto";
import { clientsFor } from "@pi/common/rpc/clients";
import * as grpc from "@grpc/grpc-js";
import { deserialize, pathOf, serialize, serviceClient } from "@pi/common/rpc/client";
import { targetOf } from "@pi/common/rpc/service-urls";
import { minterFor } from "@pi/common/rpc/service-identity";
import { createLogger } from "@pi/common/runtime/logger";
import { databaseName } from "@pi/common/store/mongo";
import type { RunningService } from "@pi/common/runtime/run-service";
import type { Settings } from "@pi/common/runtime/settings";
import { startConnectionService } from "@pi/connection";
import { startAuthService } from "../src/service.js";
import { addressOf, as, testSettings } from "../../../test/support/services.js";

// Zero trust inside (docs/security.md, "Internal calls"): the real auth and connection services,
// each with its own identity, refuse a call that carries none, and admit each caller only to the
// RPCs the allow-list gives it. Every refusal is in the refusing service's log, with the caller.
// Admin RPCs are served on each service's admin port alone (rpc/server.ts): the data port the
// gateway reaches has no route to them.

let settings: Settings;
let auth: RunningService;
let connection: RunningService;
const logLines: Record<string, unknown>[] = [];

function capture(): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split("\n").filter(Boolean))
        logLines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
}

beforeAll(async () => {
  settings = testSettings({ LOG_LEVEL: "warn" });
  auth = await startAuthService(as(settings, "auth"), createLogger("auth", "warn", capture()));
  connection = await startConnectionService(as(settings, "connection"), createLogger("connection", "warn", capture()));
  settings = { ...settings, ...addressOf("auth", auth), ...addressOf("connection", connection) };
});

afterAll(async () => {
  await Promise.all([auth?.stop(), connection?.stop()]);
  const mongo = await MongoClient.connect(settings.MONGODB_URI);
  await Promise.all(
    ["auth", "connection"].map((s) => mongo.db(databaseName(settings.DATA_NAMESPACE, s)).dropDatabase()),
  );
  await mongo.close();
});

async function codeOf(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "OK";
  } catch (err) {
    return Status[RpcError.from(err).code];
  }
}

const refusals = (method: string) =>
  logLines.filter((l) => l.method === method && typeof l.msg === "string" && l.msg.startsWith("internal call refused"));

describe("service identity on internal calls, with real services", () => {
  it("a call without a service token is refused Unauthenticated, and logged with no caller; health stays open", async () => {
    const unsigned = serviceClient(authv1.AuthService, settings.AUTH_SERVICE_URL);
    expect(
      await codeOf(
        serviceClient(authv1.AuthService, settings.AUTH_ADMIN_URL).createPartner({ name: "Anonymous Clinic" }),
      ),
    ).toBe("UNAUTHENTICATED");
    expect(await codeOf(unsigned.issueToken({ clientId: "cli_x", clientSecret: "sk_x" }))).toBe("UNAUTHENTICATED");
    expect((await clientsFor(settings).health(settings.AUTH_SERVICE_URL).check({})).status).toBeDefined();
    expect(refusals("pi.auth.v1.AuthService/CreatePartner")).toEqual([
      expect.objectContaining({ level: "warn", service: "auth", caller: null, reason: "missing" }),
    ]);
  });

  it("the gateway's data-port client cannot reach an admin RPC: not routed there (Unimplemented), whoever calls; its own RPCs pass", async () => {
    const gateway = clientsFor(as(settings, "gateway"));
    expect(await codeOf(gateway.auth().createPartner({ name: "Gateway Clinic" }))).toBe("UNIMPLEMENTED");
    expect(await codeOf(gateway.auth().getWebhookTarget({ partnerId: "ptr_x" }))).toBe("UNIMPLEMENTED");
    expect(await codeOf(gateway.connection().approveConnection({ id: "con_x" }))).toBe("UNIMPLEMENTED");
    // Not even the operator's identity finds them on the data port; nor a runtime RPC on the admin port.
    expect(await codeOf(clientsFor(settings).auth().createPartner({ name: "Misdirected Clinic" }))).toBe(
      "UNIMPLEMENTED",
    );
    expect(await codeOf(clientsFor(as(settings, "gateway")).authAdmin().getJwks({}))).toBe("UNIMPLEMENTED");
    expect(await codeOf(gateway.auth().getJwks({}))).toBe("OK");
  });

  it("the gateway's identity is refused CreatePartner on the admin port too (PermissionDenied), logged with caller gateway", async () => {
    const gateway = clientsFor(as(settings, "gateway"));
    expect(await codeOf(gateway.authAdmin().createPartner({ name: "Gateway Clinic" }))).toBe("PERMISSION_DENIED");
    expect(await codeOf(gateway.authAdmin().getWebhookTarget({ partnerId: "ptr_x" }))).toBe("PERMISSION_DENIED");
    expect(await codeOf(gateway.connectionAdmin().approveConnection({ id: "con_x" }))).toBe("PERMISSION_DENIED");
    expect(refusals("pi.auth.v1.AuthService/CreatePartner")).toContainEqual(
      expect.objectContaining({ service: "auth", caller: "gateway", reason: "not_allowed" }),
    );
    expect(refusals("pi.connection.v1.ConnectionService/ApproveConnection")).toContainEqual(
      expect.objectContaining({ service: "connection", caller: "gateway" }),
    );
  });

  it("the webhook's identity is allowed GetWebhookTarget but refused CreatePartner; the operator's creates the partner", async () => {
    const ops = clientsFor(settings).authAdmin();
    const partner = await ops.createPartner({ name: "Hooked Clinic", webhookUrl: "https://hooks.example/pi" });
    expect(partner.partnerId).toMatch(/^ptr_/);
    const webhook = clientsFor(as(settings, "webhook")).authAdmin();
    const target = await webhook.getWebhookTarget({ partnerId: partner.partnerId });
    expect(target.webhookUrl).toBe("https://hooks.example/pi");
    expect(target.signingSecret).toBe(partner.signingSecret);
    expect(await codeOf(webhook.createPartner({ name: "Webhook Clinic" }))).toBe("PERMISSION_DENIED");
    expect(refusals("pi.auth.v1.AuthService/CreatePartner")).toContainEqual(
      expect.objectContaining({ caller: "webhook", reason: "not_allowed" }),
    );
    // ... and the operator may not read the signing secret back.
    expect(await codeOf(ops.getWebhookTarget({ partnerId: partner.partnerId }))).toBe("PERMISSION_DENIED");
  });

  it("a token signed for another service is refused (wrong audience), logged with the caller it claims", async () => {
    // The gateway's token for the connection service, sent to auth (a bare grpc-js call with that header).
    const minter = minterFor(as(settings, "gateway").SERVICE_IDENTITY_KEY!);
    const forConnection = await minter.token("connection");
    expect(forConnection).not.toBe(await minter.token("auth"));
    const channel = new grpc.Client(targetOf(settings.AUTH_SERVICE_URL), grpc.credentials.createInsecure());
    const method = authv1.AuthService.method.getJwks;
    const metadata = new grpc.Metadata();
    metadata.set("pi-service-token", forConnection);
    const misaddressed = {
      getJwks: () =>
        new Promise((resolve, reject) =>
          channel.makeUnaryRequest(
            pathOf(method),
            serialize(method.input),
            deserialize(method.output),
            {},
            metadata,
            (err, res) => (err ? reject(new RpcError(err.details, err.code)) : resolve(res)),
          ),
        ),
    };
    expect(await codeOf(misaddressed.getJwks({}))).toBe("UNAUTHENTICATED");
    expect(refusals("pi.auth.v1.AuthService/GetJwks")).toContainEqual(
      expect.objectContaining({ caller: "gateway", reason: "wrong_audience" }),
    );
    channel.close();
  });

  it("no refusal line holds a token", () => {
    const text = JSON.stringify(logLines);
    expect(text).not.toMatch(/eyJ[A-Za-z0-9_-]+\.eyJ/);
  });
});
