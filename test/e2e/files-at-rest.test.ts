import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { MongoClient } from "mongodb";
import { databaseName } from "@pi/common";
import { startTestStack, type TestStack } from "../support/services.js";
import { connectedPartner, extractionOf, sendFile, waitForStatus, type ConnectedPartner } from "../support/files.js";

// Health data encrypted at rest (docs/security.md, "Data at rest"): after uploads whose bytes,
// extracted text and purpose carry distinctive markers, and their extraction, no document of any
// service's database holds a marker in any form (as stored bytes, hex or base64), nor does
// file-intake hold the elder's address. Read the way only a test may: every database, every
// collection, every raw BSON document.

let stack: TestStack;
let p: ConnectedPartner;
const marker = `ZEBRA${randomBytes(6).toString("hex")}QUOKKA`;
const purpose = `purpose-${randomBytes(6).toString("hex")}-warfarin dose change`;

beforeAll(async () => {
  stack = await startTestStack();
  p = await connectedPartner(stack, "At Rest Clinic");
});
afterAll(async () => {
  await stack?.stop();
});

/** Every form in which a value could sit in a stored document: its bytes, hex, base64 at each alignment. */
function forms(value: string): { name: string; bytes: Buffer }[] {
  const raw = Buffer.from(value, "utf8");
  const out = [{ name: "utf8", bytes: raw }, { name: "hex", bytes: Buffer.from(raw.toString("hex")) }];
  for (let shift = 0; shift < 3; shift++) {
    // The part of the base64 that does not depend on the bytes around the value.
    const b64 = Buffer.concat([Buffer.alloc(shift), raw]).toString("base64");
    out.push({ name: `base64+${shift}`, bytes: Buffer.from(b64.slice(Math.ceil((shift * 4) / 3) + 1, -4)) });
  }
  return out;
}

/** Where each form of each value occurs: database.collection and the form. */
async function occurrences(values: Record<string, string>, services: string[]): Promise<string[]> {
  const found: string[] = [];
  const client = await MongoClient.connect(stack.settings.MONGODB_URI);
  try {
    for (const service of services) {
      const db = client.db(databaseName(stack.settings.DATA_NAMESPACE, service));
      for (const { name: collection } of await db.listCollections().toArray()) {
        for await (const doc of db.collection(collection).find({}, { raw: true })) {
          const bytes = doc as unknown as Buffer;
          for (const [what, value] of Object.entries(values)) {
            for (const form of forms(value)) if (bytes.includes(form.bytes)) found.push(`${what} (${form.name}) in ${service}.${collection}`);
          }
        }
      }
    }
  } finally {
    await client.close();
  }
  return found;
}

describe("health data at rest", () => {
  it("no database holds a file's bytes, its extracted text or its purpose in plaintext; file-intake not the elder's address either", async () => {
    const small = Buffer.from(`Medication list for review.\n${marker}: warfarin 5 mg daily, INR check weekly.\n`);
    // Several chunks, the marker in each.
    const large = Buffer.from(`${`Care note, page filler. ${marker}\n`.repeat(80_000)}`);
    const ids: string[] = [];
    for (const file of [small, large]) {
      const res = await sendFile(stack.baseUrl, p.token, p.elder, file, { purpose, filename: "list.txt" });
      expect(res.status).toBe(202);
      ids.push(res.json!.id as string);
    }
    for (const id of ids) expect((await waitForStatus(stack.baseUrl, p.token, id, ["processed", "failed"])).json!.status).toBe("processed");
    // The check can fail: the text was extracted and stored, and opens with the file's data key.
    expect((await extractionOf(stack.settings, ids[0]!))!).toMatchObject({ ok: true, text: expect.stringContaining(marker) });
    expect(((await extractionOf(stack.settings, ids[1]!)) as { text: string }).text.length).toBeGreaterThan(1_000_000 - 1);

    expect(await occurrences({ marker, purpose }, ["auth", "connection", "file-intake", "webhook"])).toEqual([]);
    expect(await occurrences({ elder: p.elder }, ["file-intake"])).toEqual([]);
    // The search itself finds what is there: the connection service keeps the address (docs/security.md).
    expect((await occurrences({ elder: p.elder }, ["connection"])).length).toBeGreaterThan(0);
  });
});
