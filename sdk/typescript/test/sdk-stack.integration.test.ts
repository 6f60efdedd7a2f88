import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { createServer, type Server } from "node:http";
import { fixture } from "../../../test/support/files.js";
import { opsFor } from "../../../test/support/partner-api.js";
import { startTestStack, type TestStack } from "../../../test/support/services.js";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { main as partnerProgram } from "../examples/partner-program.js";
import { exportJWK, exportPKCS8, generateKeyPair } from "jose";
import { OAuthTokenError, PartnerApiError, PartnerClient, verifyWebhook, type WebhookEvent } from "../src/index.js";

// The SDK against the whole stack (every service in this process, real database and Kafka): what
// the partner program of docs/partners.md does, with both client authentication methods, and webhooks
// verified by the SDK during a signing-secret rotation.

const TOKEN_ENDPOINT_URL = "https://partners.example/oauth/token";
let stack: TestStack;
let ops: ReturnType<typeof opsFor>;
let server: Server;
let receiverUrl: string;
const deliveries: { raw: Buffer; header: string }[] = [];

beforeAll(async () => {
  stack = await startTestStack({
    WEBHOOK_RETRY_BASE_SECONDS: "0.2",
    SANDBOX_APPROVAL_DELAY_SECONDS: "1",
    TOKEN_ENDPOINT_URL,
  });
  ops = opsFor(stack.settings);
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      deliveries.push({ raw: Buffer.concat(chunks), header: String(req.headers["service-signature"] ?? "") });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  receiverUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}/hooks`;
});
afterAll(async () => {
  await new Promise((r) => server?.close(r));
  await stack?.stop();
});

async function arrivalFor(connectionId: string, timeoutMs = 20_000): Promise<{ raw: Buffer; header: string }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const hit = deliveries.find(
      (d) => (JSON.parse(d.raw.toString()) as WebhookEvent).data.connection_id === connectionId,
    );
    if (hit) return hit;
    if (Date.now() > deadline) throw new Error(`no webhook for ${connectionId}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("partner SDK against the stack", () => {
  it("the partner program of docs/partners.md runs as shown: a test credential, the sandbox elder, a PDF sent and processed", async () => {
    const program = readFileSync(join("sdk", "typescript", "examples", "partner-program.ts"), "utf8").trimEnd();
    expect(readFileSync(join("docs", "partners.md"), "utf8")).toContain(`\`\`\`ts\n${program}\n\`\`\``);
    const partner = await ops.partnerCreate({ name: "SDK Program Pharmacy" });
    const { sandbox_elder_address } = await ops.info();
    const file = await partnerProgram({
      PI_BASE_URL: stack.baseUrl,
      PI_CLIENT_ID: partner.test.client_id,
      PI_CLIENT_SECRET: partner.test.client_secret,
      PI_ELDER: sandbox_elder_address,
      PI_FILE: join("services", "file-intake", "test", "fixtures", "sample.pdf"),
    });
    expect(file).toEqual({ id: expect.stringMatching(/^file_/), status: "processed" });
  }, 150_000);

  it.each(["basic", "body"] as const)(
    "token (%s), connect, approval seen by webhook and by polling, a file sent and its status read",
    async (authMethod) => {
      const partner = await ops.partnerCreate({ name: `SDK ${authMethod} Pharmacy`, webhookUrl: receiverUrl });
      const { address } = await ops.elderCreate();
      const client = new PartnerClient({
        baseUrl: stack.baseUrl,
        clientId: partner.live.client_id,
        clientSecret: partner.live.client_secret,
        authMethod,
      });

      const connection = await client.connect(address);
      expect(connection).toEqual({ id: expect.stringMatching(/^con_/), status: "pending" });
      expect(await client.connect(address)).toEqual(connection); // same (partner, address), same id
      await ops.connectionAct("approve", connection.id);

      const hit = await arrivalFor(connection.id);
      const event = await verifyWebhook(hit.raw, hit.header, partner.signing_secret);
      expect(event).toMatchObject({
        type: "connection.approved",
        data: { connection_id: connection.id, status: "approved" },
      });
      expect(await client.waitForConnection(connection.id, { intervalMs: 100, timeoutMs: 10_000 })).toEqual({
        id: connection.id,
        status: "approved",
      });

      const receipt = await client.sendFile({
        file: fixture("sample.pdf"),
        filename: "lab.pdf",
        contentType: "application/pdf",
        elder: address,
        purpose: "lab_result",
      });
      expect(receipt).toEqual({ id: expect.stringMatching(/^file_/), status: "received" });
      const deadline = Date.now() + 30_000;
      let status = receipt.status;
      while (status === "received" && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        status = (await client.getFile(receipt.id)).status;
      }
      expect(status).toBe("processed");
    },
    90_000,
  );

  it("errors are typed by code: not_found, no_active_connection, invalid_client", async () => {
    const partner = await ops.partnerCreate({ name: "SDK Errors Clinic" });
    const client = new PartnerClient({
      baseUrl: stack.baseUrl,
      clientId: partner.live.client_id,
      clientSecret: partner.live.client_secret,
    });
    await expect(client.getConnection("con_00000000000000000000000000")).rejects.toMatchObject({
      status: 404,
      code: "not_found",
    });
    const unconnected = await client
      .sendFile({
        file: fixture("sample.txt"),
        filename: "note.txt",
        contentType: "text/plain",
        elder: "no.such.elder@elders.example",
      })
      .catch((e: unknown) => e);
    expect(unconnected).toBeInstanceOf(PartnerApiError);
    expect(unconnected).toMatchObject({ status: 403, code: "no_active_connection" });
    const wrong = new PartnerClient({
      baseUrl: stack.baseUrl,
      clientId: partner.live.client_id,
      clientSecret: "sk_live_wrong",
    });
    const refused = await wrong.getConnection("con_00000000000000000000000000").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OAuthTokenError);
    expect(refused).toMatchObject({ code: "invalid_client" });
  });

  it("verifyWebhook accepts a delivery signed during a rotation's overlap with the old or the new secret", async () => {
    const partner = await ops.partnerCreate({ name: "SDK Rotation Lab", webhookUrl: receiverUrl });
    const { address } = await ops.elderCreate();
    const client = new PartnerClient({
      baseUrl: stack.baseUrl,
      clientId: partner.live.client_id,
      clientSecret: partner.live.client_secret,
    });
    const rotated = await ops.partnerRotateSigningSecret(partner.partner_id, "1");
    const connection = await client.connect(address);
    await ops.connectionAct("approve", connection.id);
    const hit = await arrivalFor(connection.id);
    await expect(verifyWebhook(hit.raw, hit.header, partner.signing_secret)).resolves.toMatchObject({
      type: "connection.approved",
    });
    await expect(verifyWebhook(hit.raw, hit.header, rotated.signing_secret)).resolves.toMatchObject({
      type: "connection.approved",
    });
    await expect(
      verifyWebhook(hit.raw, hit.header, [rotated.signing_secret, partner.signing_secret]),
    ).resolves.toMatchObject({ id: expect.stringMatching(/^evt_/) });
    await expect(verifyWebhook(hit.raw, hit.header, "whsec_someone_else")).rejects.toThrow(/no signature matches/);
  }, 60_000);

  it("events(): a partner with no webhook address catches up with for await, newest first, one page at a time", async () => {
    const partner = await ops.partnerCreate({ name: "SDK Catching-up Clinic" });
    const { address } = await ops.elderCreate();
    const client = new PartnerClient({
      baseUrl: stack.baseUrl,
      clientId: partner.live.client_id,
      clientSecret: partner.live.client_secret,
    });
    const connection = await client.connect(address);
    await ops.connectionAct("approve", connection.id);
    await client.revokeConnection(connection.id);
    const deadline = Date.now() + 20_000;
    while ((await ops.webhookDeliveries(partner.partner_id)).deliveries.length < 2 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));

    const seen = [];
    for await (const event of client.events({ pageSize: 1 })) seen.push(event);
    expect(seen.map((e) => [e.type, e.data])).toEqual([
      ["connection.revoked", { connection_id: connection.id, status: "revoked" }],
      ["connection.approved", { connection_id: connection.id, status: "approved" }],
    ]);
    expect((await client.listEvents({ limit: 100 })).data).toEqual(seen);
    const approvals = [];
    for await (const event of client.events({ type: "connection.approved" })) approvals.push(event.id);
    expect(approvals).toEqual([seen[1]!.id]);
  }, 60_000);

  it("private_key_jwt: a client with a private key (a key object or a PEM), its kid and alg gets tokens and calls /v1; a key the set lacks is invalid_client", async () => {
    const partner = await ops.partnerCreate({ name: "SDK Key Pair Lab" });
    const { publicKey, privateKey } = await generateKeyPair("ES384", { extractable: true });
    const { client_id: clientId } = await ops.credentialCreate(partner.partner_id, "test", {
      jwksJson: JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: "lab-1" }] }),
    });
    const { sandbox_elder_address: elder } = await ops.info();
    for (const key of [privateKey, await exportPKCS8(privateKey)]) {
      const client = new PartnerClient({
        baseUrl: stack.baseUrl,
        clientId: clientId as string,
        authMethod: "private_key_jwt",
        privateKey: key,
        kid: "lab-1",
        alg: "ES384",
        tokenEndpointUrl: TOKEN_ENDPOINT_URL,
      });
      expect((await client.connect(elder as string)).id).toMatch(/^con_/);
    }
    const wrongKid = new PartnerClient({
      baseUrl: stack.baseUrl,
      clientId: clientId as string,
      authMethod: "private_key_jwt",
      privateKey,
      kid: "lab-2",
      alg: "ES384",
      tokenEndpointUrl: TOKEN_ENDPOINT_URL,
    });
    await expect(wrongKid.tokens.get()).rejects.toMatchObject({ code: "invalid_client" });
  });
});
