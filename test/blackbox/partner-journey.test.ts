import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { startTarget, type Target } from "./target.js";

// A partner's whole journey through the public API and the operator CLI only, so it runs against
// any deployment (see target.ts).
let target: Target;

beforeAll(async () => {
  target = await startTarget();
});
afterAll(async () => {
  await target?.stop();
});

async function json(method: string, path: string, token?: string, body?: unknown) {
  const res = await fetch(`${target.baseUrl}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body ? { "content-type": "application/json" } : {}),
    },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

async function tokenFor(credential: { client_id: string; client_secret: string }): Promise<string> {
  const res = await fetch(`${target.baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", ...credential }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { access_token: string }).access_token;
}

async function sendFile(token: string, elder: string, file: Buffer, name: string) {
  const form = new FormData();
  form.append("elder", elder);
  form.append("purpose", "discharge_summary");
  form.append("file", new Blob([file]), name);
  const res = await fetch(`${target.baseUrl}/v1/files`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
    body: form,
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

describe("a partner's journey (black box)", () => {
  it("onboarding, token, connection request, caregiver approval, a file sent and processed, revocation", async () => {
    const partner = (await target.ops("partner", "create", "--name", "Blackbox Clinic")) as {
      live: { client_id: string; client_secret: string };
    };
    const elder = (await target.ops("elder", "create")) as { address: string };
    const token = await tokenFor(partner.live);

    const requested = await json("POST", "/v1/connections", token, { elder: elder.address });
    expect(requested).toEqual({ status: 202, body: { id: expect.stringMatching(/^con_/), status: "pending" } });
    const id = requested.body.id as string;

    const pdf = readFileSync(join(process.cwd(), "..", "shared", "fixtures", "files", "sample.pdf"));
    expect((await sendFile(token, elder.address, pdf, "summary.pdf")).status).toBe(403);

    expect(await target.ops("connection", "approve", id)).toEqual({ id, internal_status: "approved" });
    expect(await json("GET", `/v1/connections/${id}`, token)).toEqual({
      status: 200,
      body: { id, status: "approved" },
    });

    const sent = await sendFile(token, elder.address, pdf, "summary.pdf");
    expect(sent).toEqual({ status: 202, body: { id: expect.stringMatching(/^file_/), status: "received" } });
    let status = "received";
    for (let i = 0; i < 100 && status === "received"; i++) {
      await new Promise((r) => setTimeout(r, 200));
      status = (await json("GET", `/v1/files/${sent.body.id}`, token)).body.status as string;
    }
    expect(status).toBe("processed");

    expect(await json("DELETE", `/v1/connections/${id}`, token)).toEqual({
      status: 200,
      body: { id, status: "revoked" },
    });
    const refused = await sendFile(token, elder.address, pdf, "summary.pdf");
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe("no_active_connection");
  });
});
