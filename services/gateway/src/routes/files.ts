import type { Middleware } from "koa";
import { LRUCache } from "lru-cache";
import { fileintakev1 } from "@pi/proto";
import { filesAccepted, filesRefused } from "@pi/common/runtime/metrics";
import type { FileIntakeClient } from "@pi/common/rpc/clients";
import type { Settings } from "@pi/common/runtime/settings";
import { invalid, PartnerError, partnerErrorFromInternal } from "../errors.js";
import { requireScope } from "../middleware.js";
import { UploadSlots } from "../upload-guards.js";
import { checkFields, parseIdempotencyKey, readMultipart, type TakeFile, uploadError } from "../upload-request.js";
import { Submission, watchTransferRate, type SubmitHeader } from "../upload-stream.js";
import { gatewayRouter, modeOf } from "../router.js";

// POST /v1/files and GET /v1/files/{id} (the order of checks: docs/files.md). The gateway enforces
// the transport's limits; file-intake alone judges the content, as the bytes stream through.

export const FILES_SCOPE = "files:write";
const FILE_ID = /^file_[0-9A-Za-z]{22}$/;

export function fileResource(f: fileintakev1.PartnerFile | undefined) {
  if (!f) throw new PartnerError("internal_error");
  // The enum's own name, lower-cased; UNSPECIFIED (never sent) reads as received.
  return { id: f.id, status: f.status ? fileintakev1.FileStatus[f.status]!.toLowerCase() : "received" };
}

/** pi_files_accepted_total and pi_files_refused_total{code}. */
const countUploads: Middleware = async (ctx, next) => {
  try {
    await next();
    if (ctx.status === 202) filesAccepted.inc();
  } catch (err) {
    filesRefused.inc({ code: partnerErrorFromInternal(err).code });
    throw err;
  }
};

export default function fileRoutes(files: FileIntakeClient, settings: Settings) {
  const router = gatewayRouter();
  // A terminal status (processed, failed) can never change again and no record is deleted, so it is
  // kept with nothing to invalidate. The key holds the asking partner and mode, so another's request
  // goes to file-intake and gets its 404 (guarantee 3).
  const terminal = new LRUCache<string, string>({ max: 10_000 });
  const domain = settings.ADDRESS_DOMAIN;
  const slots = new UploadSlots(settings.UPLOAD_CONCURRENCY_PER_PARTNER, settings.UPLOAD_CONCURRENCY_TOTAL);

  router.post("/v1/files", requireScope(FILES_SCOPE), countUploads, async (ctx) => {
    if (!ctx.is("multipart/form-data"))
      throw new PartnerError("unsupported_media_type", { message: "The body must be multipart/form-data." });
    const idempotencyKey = parseIdempotencyKey(ctx.req.headers["idempotency-key"]);
    const principal = ctx.state.principal!;
    // The body is at most this long, so the file too; unknown when the body is chunked.
    const declaredBytes = ctx.request.length === undefined ? undefined : BigInt(ctx.request.length);
    const header: SubmitHeader = { partnerId: principal.partnerId, mode: modeOf(ctx), idempotencyKey, declaredBytes };
    const release = slots.tryTake(principal.partnerId);
    // A partner, or this instance, at its cap of uploads in flight: retry after a second.
    if (!release) throw new PartnerError("rate_limited", { headers: { "Retry-After": "1" } });
    // Opened before the body is read: file-intake takes the quota's verdict on the header meanwhile.
    const submission = new Submission(files, header, settings.MAX_FILE_BYTES);
    const refused = submission.response.then(() => new Promise<never>(() => {}));
    const rate = watchTransferRate(ctx.req, settings);
    const takeFile: TakeFile = (fieldsSoFar, stream) => {
      // The fields that came before the file are checked before a byte of it is forwarded.
      checkFields(fieldsSoFar, domain, false);
      return submission.forward(stream);
    };

    try {
      await Promise.race([readMultipart(ctx, settings.MAX_FILE_BYTES, takeFile), rate.stalled, refused]);
      rate.stop();
      const fields = checkFields(ctx.request.body, domain, true);
      if (!ctx.file) throw invalid("file is required (a file part with a filename).", "file");
      const res = await submission.finish({ elder: fields.elder!, purpose: fields.purpose });
      ctx.status = 202;
      ctx.body = fileResource(res.file);
    } catch (err) {
      if (err instanceof PartnerError && err.code === "request_timeout") {
        submission.cancel(err);
        // A stalled body is not parsed further: what still arrives is dropped.
        ctx.req.unpipe();
        ctx.req.resume();
        throw err;
      }
      throw uploadError(await submission.refuse(err));
    } finally {
      rate.stop();
      release();
    }
  });

  router.get("/v1/files/:id", requireScope(FILES_SCOPE), async (ctx) => {
    const id = ctx.params.id ?? "";
    // A malformed id is as unknown as any other: the same 404, without asking file-intake.
    if (!FILE_ID.test(id)) throw new PartnerError("not_found");
    const { partnerId, mode } = ctx.state.principal!;
    const key = JSON.stringify([partnerId, mode, id]);
    const known = terminal.get(key);
    if (known) {
      ctx.body = { id, status: known };
      return;
    }
    const res = await files.getFile({ partnerId, id, mode: modeOf(ctx) });
    const resource = fileResource(res.file);
    if (resource.id === id && resource.status !== "received") terminal.set(key, resource.status);
    ctx.body = resource;
  });

  return router;
}
