import { beforeAll, describe, expect, it } from "@jest/globals";
import { randomUUID } from "node:crypto";
import { hexFlateBombPdf } from "../../services/extraction/test/hostile-pdfs.js";
import { sendFile } from "../support/files.js";
import { approvedPartner, cluster, kubectlJson, named } from "./cluster.js";

// Extraction as a workload of its own, on a live release (issue 23): a decompression bomb uploaded
// through the partner API ends `failed`, uploads keep answering 202 meanwhile, no file-intake
// container restarts (extraction no longer runs in the process that receives uploads), and the
// extraction pods are Ready again without anyone's help. The bomb is the e2e test's: a 2 MB PDF whose
// content stream, [/ASCIIHexDecode /FlateDecode], decodes to 1 GiB.

const POLL_MS = 1_000;
/** The file's status must be `failed` within this of its upload (the issue's bound). */
const FAILED_WITHIN_MS = 120_000;
/** The extraction Deployment's pods Ready again within this (CrashLoopBackOff's back-off included). */
const RECOVERED_WITHIN_MS = 300_000;

interface Pod {
  metadata: { name: string; deletionTimestamp?: string };
  status: {
    phase?: string;
    conditions?: { type: string; status: string }[];
    containerStatuses?: { name: string; restartCount: number }[];
  };
}

/** Every pod of a component, terminating ones too (a replaced pod must show up as a change). */
async function podsWithStatus(component: string): Promise<Pod[]> {
  const list = await kubectlJson<{ items: Pod[] }>(
    "get",
    "pods",
    "-l",
    `app.kubernetes.io/instance=${cluster.release},app.kubernetes.io/component=${component}`,
  );
  return list.items;
}

/** Pod name -> restarts of its containers, summed. */
async function restartsOf(component: string): Promise<Record<string, number>> {
  const pods = await podsWithStatus(component);
  return Object.fromEntries(
    pods.map((p) => [p.metadata.name, (p.status.containerStatuses ?? []).reduce((n, c) => n + c.restartCount, 0)]),
  );
}

const isReady = (p: Pod) =>
  !p.metadata.deletionTimestamp && (p.status.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");

async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    const value = await check().catch((err: unknown) => {
      last = err;
      return undefined;
    });
    if (value !== undefined) return value;
    if (Date.now() > deadline)
      throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (last error: ${(last as Error).message})` : ""}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

let token = "";
let elder = "";

async function statusOf(id: string): Promise<string> {
  const res = await fetch(`${cluster.baseUrl}/v1/files/${id}`, {
    headers: { authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(10_000),
  });
  if (res.status !== 200) throw new Error(`GET /v1/files/${id}: ${res.status} ${(await res.text()).slice(0, 200)}`);
  return ((await res.json()) as { status: string }).status;
}

const upload = (bytes: Buffer, filename: string, contentType: string) =>
  sendFile(cluster.baseUrl, token, elder, bytes, { key: randomUUID(), filename, contentType });
const note = () => upload(Buffer.from(`Care note ${randomUUID()}\n`), "note.txt", "text/plain");

beforeAll(async () => {
  const partner = await approvedPartner("Cluster Extraction Clinic");
  elder = partner.elder;
  const res = await fetch(`${cluster.baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "client_credentials", ...partner.credential }),
  });
  expect(res.status).toBe(200);
  token = ((await res.json()) as { access_token: string }).access_token;
}, 120_000);

describe("a decompression bomb uploaded to the release", () => {
  it(
    "a hex-wrapped Flate bomb (1 GiB decoded) ends failed within 2 minutes while uploads answer 202; every file-intake pod keeps its restart count and the extraction pods are Ready again by themselves",
    async () => {
      const intakeBefore = await restartsOf("file-intake");
      expect(Object.keys(intakeBefore).length).toBeGreaterThan(0);
      const extractionBefore = await podsWithStatus("extraction");
      expect(extractionBefore.length).toBeGreaterThan(0);

      const sentAt = Date.now();
      const bomb = await upload(hexFlateBombPdf(1024), "bomb.pdf", "application/pdf");
      expect({ status: bomb.status, body: bomb.text.slice(0, 200) }).toMatchObject({ status: 202 });
      const bombId = bomb.json!.id as string;

      // Uploads while the bomb is handled, about one a second (not a flood of notes for extraction to
      // catch up on afterwards): every one answered 202, and at least one is sent.
      const answers: number[] = [];
      let status = "received";
      while (status === "received" && Date.now() - sentAt < FAILED_WITHIN_MS) {
        const round = Date.now();
        answers.push((await note()).status);
        status = await statusOf(bombId);
        if (status === "received") await new Promise((r) => setTimeout(r, Math.max(0, POLL_MS - (Date.now() - round))));
      }
      expect(status).toBe("failed");
      expect(Date.now() - sentAt).toBeLessThan(FAILED_WITHIN_MS);
      expect(answers.length).toBeGreaterThan(0);
      expect(answers.filter((s) => s !== 202)).toEqual([]);

      // The extraction pods recover by themselves: the Deployment's every replica Ready again...
      const replicas = (await kubectlJson<{ spec: { replicas: number } }>("get", "deploy", named("extraction"))).spec
        .replicas;
      await until(`every extraction pod Ready (${replicas})`, RECOVERED_WITHIN_MS, async () => {
        const pods = (await podsWithStatus("extraction")).filter((p) => !p.metadata.deletionTimestamp);
        return pods.length === replicas && pods.every(isReady) ? true : undefined;
      });
      // ...and extracting: a file uploaded after the bomb ends processed.
      const after = await note();
      expect(after.status).toBe(202);
      const afterId = after.json!.id as string;
      expect(
        await until(`the note ${afterId} processed`, FAILED_WITHIN_MS, async () =>
          (await statusOf(afterId)) === "processed" ? true : undefined,
        ),
      ).toBe(true);

      // Not one file-intake container restarted, and no pod was replaced.
      expect(await restartsOf("file-intake")).toEqual(intakeBefore);
    },
    RECOVERED_WITHIN_MS + 2 * FAILED_WITHIN_MS + 60_000,
  );
});
