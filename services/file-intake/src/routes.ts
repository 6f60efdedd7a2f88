import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { fileintakev1 } from "@pi/proto";
import { getFile, modeOf, submitFile, type IntakeDeps } from "./intake.js";

export type FileIntakeDeps = IntakeDeps;

export default (deps: FileIntakeDeps) => (router: ConnectRouter) => {
  router.service(fileintakev1.FileIntakeService, {
    async submitFile(requests, ctx) {
      const file = await submitFile(deps, requests, ctx.signal);
      return { file: { id: file.id, status: fileintakev1.FileStatus.RECEIVED } };
    },
    async getFile(req) {
      return { file: await getFile(deps.store, req) };
    },
    async checkStorageQuota(req) {
      const mode = modeOf(req.mode);
      if (!req.partnerId || !mode) throw new ConnectError("partner_id and mode are required", Code.InvalidArgument);
      const verdict = await deps.quota.check(req.partnerId, mode, req.declaredBytes === undefined ? undefined : Number(req.declaredBytes));
      return verdict.fits ? { fits: true } : { fits: false, retryAfterSeconds: verdict.retryAfterSeconds };
    },
  });
};
