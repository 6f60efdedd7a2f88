import { ErrorReason, RpcError, Status, serviceError } from "@pi/common/rpc/errors";
import type { Router } from "@pi/common/rpc/server";
import { type commonv1, fileintakev1 } from "@pi/proto";
import { isFailureReason, type Extracted } from "@pi/common/rules/extracted";
import { modeFromProto } from "@pi/common/rules/mode";
import { ACCEPTED_TYPES } from "@pi/common/rules/media-types";
import type { ExtractionRecords, Take } from "./extraction-records.js";
import { submitFile, type IntakeDeps } from "./intake.js";
import type { FileStatus, FileStore } from "./store.js";

const statusEnum = (status: FileStatus | "unknown") =>
  ({
    received: fileintakev1.FileStatus.RECEIVED,
    processed: fileintakev1.FileStatus.PROCESSED,
    failed: fileintakev1.FileStatus.FAILED,
    unknown: fileintakev1.FileStatus.UNSPECIFIED,
  })[status];

const takeMessage = (take: Take) =>
  take.taken
    ? {
        taken: true,
        holder: take.holder,
        mediaType: take.mediaType,
        size: BigInt(take.size),
        attempt: take.attempt,
        status: fileintakev1.FileStatus.RECEIVED,
      }
    : { taken: false, status: statusEnum(take.status) };

/** The read of GET /v1/files/{id}: by _id alone; ownership is checked in code. */
export const fileById = (id: string) => ({ _id: id });

/** The partner's own file in the credential's mode; any other id (the gateway checked its shape) is the same NOT_FOUND. */
async function getFile(store: FileStore, req: { partnerId: string; id: string; mode: commonv1.Mode }) {
  const mode = modeFromProto(req.mode);
  const notFound = () => serviceError(ErrorReason.NOT_FOUND, "no such file");
  if (!mode || !req.partnerId) throw notFound();
  const doc = await store.files.findOne(fileById(req.id), { projection: { partnerId: 1, mode: 1, status: 1 } });
  if (!doc || doc.partnerId !== req.partnerId || doc.mode !== mode) throw notFound();
  return { id: doc._id, status: statusEnum(doc.status) };
}

/** The outcome as the extraction service sent it; a malformed one is the caller's mistake. */
function outcomeOf(req: fileintakev1.RecordExtractionRequest): Extracted {
  const kind = ACCEPTED_TYPES.find((t) => t.extraction === req.kind)?.extraction;
  const bad = (what: string) => new RpcError(`extraction outcome: ${what}`, Status.INVALID_ARGUMENT);
  if (!kind) throw bad("unknown kind");
  if (!req.ok) {
    if (!isFailureReason(req.failureReason)) throw bad("failure_reason is required");
    return { ok: false, kind, reason: req.failureReason, error: (req.error ?? "").slice(0, 500) };
  }
  switch (kind) {
    case "pdf-text":
      if (req.text === undefined || req.textLength === undefined || req.pages === undefined)
        throw bad("text, text_length and pages are required");
      return {
        ok: true,
        kind,
        text: req.text,
        textLength: Number(req.textLength),
        textTruncated: req.textTruncated ?? false,
        pages: req.pages,
      };
    case "plain-text":
      if (req.textLength === undefined) throw bad("text_length is required");
      return { ok: true, kind, textLength: Number(req.textLength) };
    case "image-dimensions":
      if (!req.width || !req.height) throw bad("width and height are required");
      return { ok: true, kind, width: req.width, height: req.height };
    case "audio-duration":
      if (req.durationSeconds === undefined) throw bad("duration_seconds is required");
      return { ok: true, kind, durationSeconds: req.durationSeconds };
  }
}

export default (deps: IntakeDeps & { extraction: ExtractionRecords }) => (router: Router) => {
  router.service(fileintakev1.FileIntakeService, {
    async submitFile(requests, ctx) {
      const file = await submitFile(deps, requests, ctx.signal);
      return { file: { id: file.id, status: fileintakev1.FileStatus.RECEIVED } };
    },
    async getFile(req) {
      return { file: await getFile(deps.store, req) };
    },
    // 1.0.0 compatibility: only 1.0.0 gateways ask before the submit; goes once 1.0.0 is not run.
    async checkStorageQuota(req) {
      const mode = modeFromProto(req.mode);
      if (!req.partnerId || !mode) throw new RpcError("partner_id and mode are required", Status.INVALID_ARGUMENT);
      return deps.quota.check(
        req.partnerId,
        mode,
        req.declaredBytes === undefined ? undefined : Number(req.declaredBytes),
      );
    },
    async takeFileForExtraction(req) {
      if (!req.fileId || !req.leaseMs || !req.maxAttempts)
        throw new RpcError("file_id, lease_ms and max_attempts are required", Status.INVALID_ARGUMENT);
      return takeMessage(await deps.extraction.take(req.fileId, req.leaseMs, req.maxAttempts));
    },
    async takeNextFileForExtraction(req) {
      if (!req.leaseMs || !req.maxAttempts)
        throw new RpcError("lease_ms and max_attempts are required", Status.INVALID_ARGUMENT);
      const next = await deps.extraction.takeNext(req.leaseMs, req.maxAttempts);
      return next ? { found: true, fileId: next.fileId, take: takeMessage(next.take) } : { found: false };
    },
    async readFileForExtraction(req) {
      const part = await deps.extraction.read(req.fileId, req.holder, req.part).catch((err: unknown) => {
        if (err instanceof RangeError) throw new RpcError(err.message, Status.OUT_OF_RANGE);
        throw err;
      });
      if (!part) throw new RpcError("the lease is not the caller's", Status.FAILED_PRECONDITION);
      return { chunk: part.bytes, parts: part.parts };
    },
    async renewExtractionLease(req) {
      return { held: await deps.extraction.renew(req.fileId, req.holder, req.leaseMs || 60_000) };
    },
    async recordExtraction(req) {
      const status = await deps.extraction.record(req.fileId, req.holder, outcomeOf(req));
      return status ? { recorded: true, status: statusEnum(status) } : { recorded: false };
    },
    async listFilesAwaitingExtraction(req) {
      return { fileIds: await deps.extraction.awaiting(req.receivedBeforeMs, req.limit || 50) };
    },
  });
};
