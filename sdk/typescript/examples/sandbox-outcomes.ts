import { PartnerApiError, PartnerClient, type FileReceipt } from "@pi/partner-sdk";

/** Every outcome of a connection and of a file, rehearsed in the sandbox with a test credential. */
export async function rehearse(env: NodeJS.ProcessEnv = process.env): Promise<Record<string, string>> {
  const client = new PartnerClient({
    baseUrl: env.PI_BASE_URL!,
    clientId: env.PI_TEST_CLIENT_ID!,
    clientSecret: env.PI_TEST_CLIENT_SECRET!,
  });
  const sandbox = env.PI_SANDBOX_ELDER!; // the sandbox elder's address
  const seen: Record<string, string> = {};
  const note = {
    file: new TextEncoder().encode("Medication list: 1 tablet daily.\n"),
    filename: "note.txt",
    contentType: "text/plain",
    elder: sandbox,
  };
  const refusal = async (act: () => Promise<unknown>) => {
    try {
      await act();
      return "none";
    } catch (err) {
      if (err instanceof PartnerApiError) return err.code;
      throw err;
    }
  };
  const finished = async (file: FileReceipt) => {
    while (file.status === "received") {
      await new Promise((resolve) => setTimeout(resolve, 500));
      file = await client.getFile(file.id);
    }
    return file.status;
  };

  // The caregiver declines. You are never told: the connection reads pending, and sends are refused.
  const connection = await client.connect(sandbox);
  seen.declined = (await client.testHelpers.declineConnection(connection.id)).status; // "pending"
  seen.sendWhilePending = await refusal(() => client.sendFile(note)); // "no_active_connection"
  // An act the caregiver could not do from there is refused, and changes nothing.
  seen.severPending = await refusal(() => client.testHelpers.severConnection(connection.id)); // "invalid_request"
  // 30 days pass without an approval: expired, no event. Ask again.
  seen.expired = (await client.testHelpers.expireConnection(connection.id)).status; // "expired"

  // Asked again (the same id, pending anew), the caregiver approves: connection.approved reaches your webhook.
  const again = await client.connect(sandbox);
  seen.approved = (await client.testHelpers.approveConnection(again.id)).status; // "approved"
  seen.file = await finished(await client.sendFile(note)); // "processed"
  seen.failedFile = await finished(await client.sendFile({ ...note, purpose: "sandbox_failed" })); // "failed"

  // The caregiver severs: connection.revoked reaches your webhook, and sends are refused again.
  seen.severed = (await client.testHelpers.severConnection(again.id)).status; // "revoked"
  seen.sendAfterSever = await refusal(() => client.sendFile(note)); // "no_active_connection"
  return seen;
}
