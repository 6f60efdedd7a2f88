import { afterAll, beforeAll, describe, expect, it } from "@jest/globals";
import { commonv1, fileintakev1 } from "@pi/proto";
import { ErrorReason, serviceError } from "@pi/common/rpc/errors";
import { startEdge, type Edge } from "./edge-harness.js";

// GET /v1/files/{id} keeps a file's status once it is terminal (processed, failed): asked again,
// the gateway answers the same bytes without file-intake. Only the owner's own request, in the
// same mode, finds it; a file still received is asked for every time.

describe("GET /v1/files/{id} with the terminal-status cache", () => {
  const OWNER = "ptr_owner";
  const id = (c: string) => `file_${c.repeat(22)}`;
  const statuses = new Map<string, fileintakev1.FileStatus>([
    [id("p"), fileintakev1.FileStatus.PROCESSED],
    [id("f"), fileintakev1.FileStatus.FAILED],
    [id("r"), fileintakev1.FileStatus.RECEIVED],
  ]);
  const asked: string[] = [];
  let edge: Edge;

  beforeAll(async () => {
    edge = await startEdge({
      files: {
        // The owner's live files; anything else is the one NOT_FOUND.
        getFile(req) {
          asked.push(req.id);
          const status = statuses.get(req.id);
          if (status === undefined || req.partnerId !== OWNER || req.mode !== commonv1.Mode.LIVE)
            throw serviceError(ErrorReason.NOT_FOUND, "no such file");
          return { file: { id: req.id, status } };
        },
      },
    });
  });
  afterAll(async () => {
    await edge?.stop();
  });

  const get = async (fileId: string, partnerId = OWNER, mode: "live" | "test" = "live") =>
    edge.send("GET", `/v1/files/${fileId}`, {
      headers: { authorization: `Bearer ${await edge.token(partnerId, "files:write", mode)}` },
    });
  const askedFor = (fileId: string) => asked.filter((a) => a === fileId).length;

  it("a processed or failed file read twice: the same bytes, file-intake asked once", async () => {
    for (const fileId of [id("p"), id("f")]) {
      const first = await get(fileId);
      const second = await get(fileId);
      expect(first.status).toBe(200);
      expect(second.status).toBe(200);
      expect(second.text).toBe(first.text);
      expect(second.headers["content-type"]).toBe(first.headers["content-type"]);
      expect(askedFor(fileId)).toBe(1);
    }
    expect(JSON.parse((await get(id("f"))).text)).toEqual({ id: id("f"), status: "failed" });
  });

  it("a file still received is asked for every time, and kept once it is processed", async () => {
    const fileId = id("r");
    expect(JSON.parse((await get(fileId)).text)).toEqual({ id: fileId, status: "received" });
    expect(JSON.parse((await get(fileId)).text)).toEqual({ id: fileId, status: "received" });
    expect(askedFor(fileId)).toBe(2);
    statuses.set(fileId, fileintakev1.FileStatus.PROCESSED);
    expect(JSON.parse((await get(fileId)).text)).toEqual({ id: fileId, status: "processed" });
    expect(JSON.parse((await get(fileId)).text)).toEqual({ id: fileId, status: "processed" });
    expect(askedFor(fileId)).toBe(3);
  });

  it("no-oracle guarantee 3: another partner, or the owner in the other mode, still gets the 404 of an unknown id for a kept file, from file-intake", async () => {
    const fileId = id("p");
    expect((await get(fileId)).status).toBe(200); // kept
    const before = askedFor(fileId);
    const unknown = await get(id("u"), "ptr_other");
    const foreign = await get(fileId, "ptr_other");
    const otherMode = await get(fileId, OWNER, "test");
    expect(unknown.status).toBe(404);
    expect(foreign.status).toBe(404);
    expect(otherMode.status).toBe(404);
    expect(foreign.text).toBe(unknown.text);
    expect(otherMode.text).toBe(unknown.text);
    expect(askedFor(fileId)).toBe(before + 2);
  });
});
