import { readFile } from "node:fs/promises";
import { PartnerClient, type FileReceipt } from "@pi/partner-sdk";

export async function main(env: NodeJS.ProcessEnv = process.env): Promise<FileReceipt> {
  const client = new PartnerClient({
    baseUrl: env.PI_BASE_URL!, // the base address you were given
    clientId: env.PI_CLIENT_ID!,
    clientSecret: env.PI_CLIENT_SECRET!, // sent by HTTP Basic; authMethod: "body" puts it in the form
  });

  // Ask to be connected; the elder's caregiver approves in the app (a test credential's
  // connection to the sandbox elder approves by itself). Or wait for connection.approved by webhook.
  const connection = await client.connect(env.PI_ELDER!);
  const approved = await client.waitForConnection(connection.id, { intervalMs: 2_000, timeoutMs: 120_000 });
  if (approved.status !== "approved") throw new Error(`connection ${connection.id} is ${approved.status}`);

  // One file per request. Retries (no answer, 429, 503) reuse its Idempotency-Key: stored once.
  const receipt = await client.sendFile({
    file: await readFile(env.PI_FILE!),
    filename: "lab-result.pdf",
    contentType: "application/pdf",
    elder: env.PI_ELDER!,
    purpose: "lab_result",
  });
  let file = receipt;
  while (file.status === "received") {
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    file = await client.getFile(receipt.id);
  }
  return file; // processed (or failed)
}
