import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { MongoClient, type Db } from "mongodb";
import { databaseName } from "@pi/common/store/mongo";
import { LocalKeyWrapper } from "@pi/common/store/data-keys";
import type { Settings } from "@pi/common/runtime/settings";
import { readExtraction, type StoredExtraction } from "../../services/file-intake/test/read-blob.js";
import { BLOB_SEGMENTS, openFileStore } from "../../services/file-intake/src/store.js";
import type { TestStack } from "./services.js";
import { accessToken, call, opsFor } from "./partner-api.js";
import { validateResponse } from "./openapi.js";

// Helpers for the file tests: multipart bodies built byte by byte (so a test controls the order and
// shape of every part), sample files, and partners with an approved connection.

const fixtures = join(
  dirname(fileURLToPath(import.meta.url)),
  "..",
  "..",
  "services",
  "file-intake",
  "test",
  "fixtures",
);

export function fixture(name: string): Buffer {
  return readFileSync(join(fixtures, name));
}

export const SAMPLES = [
  "sample.pdf",
  "sample.txt",
  "sample.jpg",
  "sample.png",
  "sample.heic",
  "sample.wav",
  "sample.mp3",
  "sample.m4a",
] as const;

export type Part =
  | { name: string; value: string }
  | { name: string; filename: string; data: Uint8Array | (() => AsyncIterable<Uint8Array>); contentType?: string };

export const textPart = (name: string, value: string): Part => ({ name, value });
type FileData = Uint8Array | (() => AsyncIterable<Uint8Array>);

export const filePart = (data: FileData, filename = "upload.bin", contentType = "application/octet-stream"): Part => ({
  name: "file",
  filename,
  data,
  contentType,
});

/** A multipart/form-data body as a stream: large files are generated chunk by chunk, never held whole. */
export function multipart(parts: Part[], boundary = `----pi${randomBytes(12).toString("hex")}`) {
  async function* body(): AsyncGenerator<Uint8Array> {
    for (const part of parts) {
      if ("value" in part) {
        yield Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"\r\n\r\n${part.value}\r\n`,
        );
      } else {
        yield Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"; filename="${part.filename}"\r\nContent-Type: ${part.contentType ?? "application/octet-stream"}\r\n\r\n`,
        );
        if (part.data instanceof Uint8Array) yield part.data;
        else for await (const chunk of part.data()) yield chunk;
        yield Buffer.from("\r\n");
      }
    }
    yield Buffer.from(`--${boundary}--\r\n`);
  }
  return { contentType: `multipart/form-data; boundary=${boundary}`, body };
}

/** `size` bytes of a plain-text file (printable ASCII lines), generated in 64 KiB chunks. */
export function generatedText(size: number): () => AsyncIterable<Uint8Array> {
  const line = Buffer.from("Medication list: 1 tablet daily with food, review in 2 weeks.\n");
  const block = Buffer.alloc(64 * 1024);
  for (let i = 0; i < block.length; i++) block[i] = line[i % line.length]!;
  return async function* () {
    for (let sent = 0; sent < size; sent += block.length) yield block.subarray(0, Math.min(block.length, size - sent));
  };
}

export interface Response {
  status: number;
  headers: Headers;
  text: string;
  json: Record<string, unknown> | undefined;
}

export async function postMultipart(
  baseUrl: string,
  token: string | undefined,
  parts: Part[],
  headers: Record<string, string> = {},
): Promise<Response> {
  const { contentType, body } = multipart(parts);
  const iterator = body();
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
  });
  const res = await fetch(`${baseUrl}/v1/files`, {
    method: "POST",
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), "content-type": contentType, ...headers },
    body: stream,
    duplex: "half",
  } as RequestInit);
  const text = await res.text();
  validateResponse("POST", "/v1/files", res.status, res.headers, text);
  let json: Record<string, unknown> | undefined;
  try {
    json = text ? (JSON.parse(text) as Record<string, unknown>) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** The usual send: elder, optional purpose, then the file. */
export function sendFile(
  baseUrl: string,
  token: string,
  elder: string,
  data: FileData,
  opts: { purpose?: string; key?: string; filename?: string; contentType?: string } = {},
) {
  const parts: Part[] = [textPart("elder", elder)];
  if (opts.purpose !== undefined) parts.push(textPart("purpose", opts.purpose));
  parts.push(filePart(data, opts.filename, opts.contentType));
  return postMultipart(baseUrl, token, parts, opts.key !== undefined ? { "idempotency-key": opts.key } : {});
}

export interface ConnectedPartner {
  partnerId: string;
  live: { clientId: string; clientSecret: string };
  test: { clientId: string; clientSecret: string };
  token: string;
  elder: string;
  connectionId: string;
}

/** A partner with a live token and an approved connection to a fresh elder. */
export async function connectedPartner(
  stack: Pick<TestStack, "settings" | "baseUrl">,
  name = "Acme Pharmacy",
): Promise<ConnectedPartner> {
  const ops = opsFor(stack.settings);
  const partner = await ops.partnerCreate({ name });
  const token = await accessToken(stack.baseUrl, partner.live.client_id, partner.live.client_secret);
  const elder = (await ops.elderCreate()).address;
  const con = await call(stack.baseUrl, token, "POST", "/v1/connections", { elder });
  if (con.status !== 202) throw new Error(`connection request failed: ${con.status} ${con.text}`);
  const connectionId = con.json!.id as string;
  await ops.connectionAct("approve", connectionId);
  return {
    partnerId: partner.partner_id,
    live: { clientId: partner.live.client_id, clientSecret: partner.live.client_secret },
    test: { clientId: partner.test.client_id, clientSecret: partner.test.client_secret },
    token,
    elder,
    connectionId,
  };
}

/** Polls GET /v1/files/{id} until its status is one of `statuses`. */
export async function waitForStatus(
  baseUrl: string,
  token: string,
  id: string,
  statuses: string[],
  timeoutMs = 60_000,
) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await call(baseUrl, token, "GET", `/v1/files/${id}`);
    if (res.status === 200 && statuses.includes(res.json!.status as string)) return res;
    if (Date.now() > deadline) throw new Error(`file ${id} still ${res.status} ${res.text} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** file-intake's own database, read the way only a test may. */
export async function withFileDb<T>(settings: Settings, use: (db: Db) => Promise<T>): Promise<T> {
  const client = await MongoClient.connect(settings.MONGODB_URI);
  try {
    return await use(client.db(databaseName(settings.DATA_NAMESPACE, "file-intake")));
  } finally {
    await client.close();
  }
}

/** A file's extraction result, opened with the stack's DATA_KEYS (it is stored sealed); null when there is none. */
export function extractionOf(settings: Settings, fileId: string): Promise<StoredExtraction | null> {
  return withFileDb(settings, async (db) =>
    readExtraction(await openFileStore(db), LocalKeyWrapper.fromSetting(settings.DATA_KEYS!), fileId),
  );
}

/** The blobs (hex ids) that have segments stored: a file's, or an upload's still staged. */
async function blobsWithSegments(db: Db): Promise<Set<string>> {
  const ids = await db
    .collection(BLOB_SEGMENTS)
    .find({}, { projection: { _id: 1 } })
    .toArray();
  return new Set(ids.map((d) => String(d._id).split(":")[0]!));
}

/** How many files, stored blobs, segments and open uploads file-intake holds. */
export function storedCounts(settings: Settings) {
  return withFileDb(settings, async (db) => ({
    files: await db.collection("files").countDocuments(),
    blobs: (await blobsWithSegments(db)).size,
    chunks: await db.collection(BLOB_SEGMENTS).countDocuments(),
    openUploads: await db.collection("uploads").countDocuments({ discardedAt: null }),
  }));
}

/**
 * The counts once nothing is in flight: no open upload and no segment of a blob no file names (a
 * refused upload's bytes are deleted just after the refusal is answered).
 */
export async function settledCounts(settings: Settings, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    // Settled first, then the counts: read the other way round, a discard finishing between the two
    // reads would return counts that still hold the bytes it deleted. (A discard marks its upload
    // document once its last insert has landed, then deletes the bytes.)
    const settled = await withFileDb(settings, async (db) => {
      if ((await db.collection("uploads").countDocuments({ discardedAt: null })) > 0) return false;
      const named = new Set(
        (
          await db
            .collection("files")
            .find({}, { projection: { blobId: 1 } })
            .toArray()
        ).map((f) => String(f.blobId)),
      );
      return [...(await blobsWithSegments(db))].every((id) => named.has(id));
    });
    const counts = await storedCounts(settings);
    if ((settled && counts.openUploads === 0) || Date.now() > deadline) return counts;
    await new Promise((r) => setTimeout(r, 100));
  }
}
